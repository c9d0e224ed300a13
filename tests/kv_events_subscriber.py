"""A KV-cache-aware router's view of a KV event stream, run as its own process by
tests/test_kv_events_e2e.py.

It knows nothing of verikv: it reads vLLM's wire format the way llm-d's indexer and Dynamo
do (msgpack decoded without a schema, event fields selected by name under the ``"type"``
tag), keeps a multiset of ``(group, block hash)``, recovers missed batches through the
replay socket, and stops at the first batch with no events (the test's end marker). It prints
one JSON object: the rebuilt multiset and what it saw.

usage: python kv_events_subscriber.py PUB_ENDPOINT REPLAY_ENDPOINT TOPIC
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Any

import msgspec
import zmq

#: generous bounds that only stop a hang; nothing is judged by time
OVERALL_SECONDS = 300.0
POLL_MS = 200
END_SEQ = -1
STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name")


class Malformed(Exception):
    """The stream is not in vLLM's wire format."""


class Router:
    def __init__(self) -> None:
        self.blocks: Counter[tuple[int | None, str]] = Counter()
        self.next_seq = 0
        self.done = False
        self.batches = 0
        self.events: Counter[str] = Counter()
        self.max_hashes = 0
        self.max_same_kind_and_group = 0
        self.replays = 0
        self.ranks: set[Any] = set()
        self.block_sizes: set[int] = set()
        self.groups_stored: set[Any] = set()

    def on_message(self, seq: int, payload: bytes) -> None:
        if seq != self.next_seq:
            raise Malformed(f"applying seq {seq}, expected {self.next_seq}")
        batch = msgspec.msgpack.decode(payload)
        if not (isinstance(batch, list) and len(batch) == 3 and isinstance(batch[0], float)
                and isinstance(batch[1], list)):
            raise Malformed(f"batch {seq} is not [ts, events, data_parallel_rank]: {batch!r:.200}")
        self.ranks.add(batch[2])
        kinds = Counter((e.get("type"), e.get("group_idx")) for e in batch[1] if isinstance(e, dict))
        self.max_same_kind_and_group = max([self.max_same_kind_and_group, *kinds.values()])
        for event in batch[1]:
            self.on_event(event)
        self.batches += 1
        self.next_seq = seq + 1
        self.done = not batch[1]

    def on_event(self, event: Any) -> None:
        if not isinstance(event, dict) or "type" not in event:
            raise Malformed(f"event is not a tagged map: {event!r:.200}")
        kind = event["type"]
        self.events[kind] += 1
        if kind == "AllBlocksCleared":
            self.blocks.clear()
            return
        group = event.get("group_idx")
        hashes = event["block_hashes"]
        if not hashes or not all(isinstance(h, (bytes, int)) for h in hashes):
            raise Malformed(f"bad block_hashes {hashes!r:.200}")
        self.max_hashes = max(self.max_hashes, len(hashes))
        keys = [(group, h.hex() if isinstance(h, bytes) else str(h)) for h in hashes]
        if kind == "BlockStored":
            missing = [f for f in STORED_FIELDS if f not in event]
            if missing or len(event["token_ids"]) < event["block_size"] * len(hashes):
                raise Malformed(f"BlockStored lacks {missing} or covers too few tokens")
            self.block_sizes.add(event["block_size"])
            self.groups_stored.add(group)
            self.blocks.update(keys)
        elif kind == "BlockRemoved":
            for key in keys:
                if self.blocks[key] <= 0:
                    raise Malformed(f"removal of a block never stored: {key}")
                self.blocks[key] -= 1
                if not self.blocks[key]:
                    del self.blocks[key]
        else:
            raise Malformed(f"unknown event type {kind!r}")


def replay(sock: zmq.Socket[bytes], router: Router, deadline: float) -> None:
    """Ask for every batch from the next expected one on and apply those in order."""
    router.replays += 1
    sock.send_multipart((b"", router.next_seq.to_bytes(8, "big")))
    while time.monotonic() < deadline:
        if not sock.poll(POLL_MS):
            continue
        _, _topic, seq_bytes, payload = sock.recv_multipart()
        seq = int.from_bytes(seq_bytes, "big", signed=True)
        if seq == END_SEQ:
            return
        if seq >= router.next_seq:
            router.on_message(seq, payload)
    raise Malformed("replay did not end")


def main(pub_endpoint: str, replay_endpoint: str, topic: str) -> int:
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.connect(pub_endpoint)
    sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(replay_endpoint)
    router = Router()
    deadline = time.monotonic() + OVERALL_SECONDS
    try:
        while not router.done:
            if time.monotonic() > deadline:
                raise Malformed(f"no end marker (next seq {router.next_seq})")
            if not sub.poll(POLL_MS):
                replay(dealer, router, deadline)  # quiet: perhaps all was sent before we joined
                continue
            msg_topic, seq_bytes, payload = sub.recv_multipart()
            if msg_topic != topic.encode():
                raise Malformed(f"topic {msg_topic!r}")
            seq = int.from_bytes(seq_bytes, "big")
            if seq > router.next_seq:
                replay(dealer, router, deadline)  # a gap: fetch what the live stream missed
            if seq == router.next_seq:
                router.on_message(seq, payload)
    except Malformed as exc:
        print(json.dumps({"error": str(exc)}))
        return 1
    finally:
        sub.close(linger=0)
        dealer.close(linger=0)
        ctx.term()
    print(json.dumps({
        "blocks": sorted([-1 if g is None else g, h, n] for (g, h), n in router.blocks.items()),
        "batches": router.batches,
        "events": dict(router.events),
        "max_hashes_per_event": router.max_hashes,
        "max_same_kind_and_group_per_batch": router.max_same_kind_and_group,
        "replays": router.replays,
        "ranks": sorted(map(str, router.ranks)),
        "block_sizes": sorted(router.block_sizes),
        "groups_stored": sorted(map(str, router.groups_stored)),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
