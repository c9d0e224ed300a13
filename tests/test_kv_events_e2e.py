"""A subscriber PROCESS on loopback receives verikv's KV events in vLLM's
wire format and rebuilds the exact cached-key set of the manager after a scheduling run.

The subscriber (tests/kv_events_subscriber.py) is a separate Python process that does not
import verikv: it decodes raw msgpack, selects fields by name, and keeps a multiset of
``(group, block hash)``. The run publishes one batch per scheduler step over ZMQ PUB on
``tcp://127.0.0.1:<free port>``; the subscriber catches up on whatever it missed through the
replay socket, and stops at an empty batch (the end marker). Nothing is judged by time; the
timeouts only stop a hang.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("zmq")
pytest.importorskip("msgspec")

from verikv import CacheGroupSpec, CacheManager, FullAttentionSpec, Request, SlidingWindowSpec
from verikv.events import PageStored, split_group, wire_hash
from verikv.kv_events import ZmqEventPublisher

SUBSCRIBER = Path(__file__).with_name("kv_events_subscriber.py")
KW: dict[str, Any] = dict(num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)
GROUPS = [CacheGroupSpec(FullAttentionSpec(page_size=4, **KW)),
          CacheGroupSpec(SlidingWindowSpec(page_size=4, sliding_window=8, **KW))]
TOPIC = "kv-events"


def cached_multiset(m: CacheManager) -> Counter[tuple[int, str]]:
    """The manager's cached map as the router should see it: (group, wire hash) -> pages."""
    out: Counter[tuple[int, str]] = Counter()
    for key, pages in m.page_pool.cached_items():
        content, group = split_group(key)
        out[(-1 if group is None else group, wire_hash(content).hex())] += len(pages)
    return out


def scheduling_run(m: CacheManager, publish: Any, steps: int = 400, seed: int = 17) -> dict[str, int]:
    """Admit, decode, finish and preempt requests with shared prefixes in a small pool (so
    cached pages are evicted for reuse), reset the prefix cache once when idle, and publish
    the events of each step as one batch. Returns how often each thing happened."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1000) for _ in range(rng.randrange(4, 20))] for _ in range(5)]
    running: list[Request] = []
    seen: Counter[str] = Counter()
    for step in range(steps):
        action = rng.random()
        if step == steps // 2:
            for req in running:
                m.free(req)
            running.clear()
            seen["reset"] += m.reset_prefix_cache()
        elif action < 0.4 or not running:
            prompt = rng.choice(prefixes) + [rng.randrange(1000) for _ in range(rng.randrange(1, 12))]
            req = Request(f"r{step}", prompt, cache_salt=rng.choice([None, None, "tenant-a"]),
                          lora_id=rng.choice([None, None, 1]))
            hits, n = m.get_computed_pages(req)
            if m.allocate_slots(req, req.num_tokens - n, n, hits) is None:
                seen["refused"] += 1
            else:
                req.num_computed_tokens = req.num_tokens
                running.append(req)
                seen["admitted"] += 1
        elif action < 0.85:
            req = rng.choice(running)
            if req.num_tokens >= 56:
                continue
            req.append_output_token_ids([rng.randrange(1000)])
            if m.allocate_slots(req, 1) is None:  # no page: preempt it, as a scheduler would
                running.remove(req)
                m.free(req)
                seen["preempted"] += 1
            else:
                req.num_computed_tokens += 1
                seen["decoded"] += 1
        else:
            req = running.pop(rng.randrange(len(running)))
            m.free(req)
            seen["finished"] += 1
        if publish(m) is not None:
            seen["batches"] += 1
    return dict(seen)


def check_hashes_follow_from_the_published_fields(m: CacheManager, stored: list[PageStored]) -> int:
    """A router holding the manager's hash scheme and seed recomputes every published hash from
    the event's parent hash, tokens and extra keys. Returns how many hashes were checked."""
    checked = 0
    for event in stored:
        assert event.lora_id is None or event.extra_keys is not None  # the LoRA identity is in the keys
        parent = None if event.parent_page_hash is None else int.from_bytes(event.parent_page_hash, "little")
        ps = event.page_size
        assert ps is not None and len(event.token_ids) == ps * len(event.page_hashes)
        for i, published in enumerate(event.page_hashes):
            extra = None if event.extra_keys is None else event.extra_keys[i]
            key = m.hasher.hash_page(parent, event.token_ids[i * ps:(i + 1) * ps], extra)
            assert wire_hash(key) == published
            parent = key.hash_value
            checked += 1
    return checked


def test_a_subscriber_process_rebuilds_the_managers_cached_keys() -> None:
    m = CacheManager(40, GROUPS, 64, hash_seed=0, enable_kv_events=True)
    published: list[Any] = []

    def publish_and_keep(manager: CacheManager) -> int | None:
        events = manager.take_events()
        published.extend(events)
        return pub.publish(events) if events else None

    with ZmqEventPublisher("tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*", topic=TOPIC,
                           data_parallel_rank=0) as pub:
        assert pub.replay_endpoint is not None
        sub = subprocess.Popen([sys.executable, str(SUBSCRIBER), pub.endpoint, pub.replay_endpoint, TOPIC],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            seen = scheduling_run(m, publish_and_keep)
            end = pub.publish([])  # the end marker
            out, err = sub.communicate(timeout=600)
        finally:
            if sub.poll() is None:
                sub.kill()
                sub.communicate()
    assert sub.returncode == 0, err
    report = json.loads(out)
    # the run did what it claims: evictions, refusals or preemptions, one reset
    assert seen["reset"] == 1 and seen["admitted"] > 50 and seen["decoded"] > 50, seen
    assert report["events"].get("BlockRemoved", 0) > 0 and report["events"]["AllBlocksCleared"] == 1, report
    # every batch arrived, in order, through the live stream or the replay socket
    assert report["batches"] == end + 1 == seen["batches"] + 1
    assert report["ranks"] == ["0"] and report["block_sizes"] == [4] and report["groups_stored"] == ["0", "1"]
    # batched per call: a batch (one manager call) has at most one event per kind and group,
    # and events do cover several pages
    assert report["max_same_kind_and_group_per_batch"] == 1 and report["max_hashes_per_event"] > 1, report
    stored = [e for e in published if isinstance(e, PageStored)]
    assert report["events"]["BlockStored"] == len(stored)
    assert check_hashes_follow_from_the_published_fields(m, stored) == sum(len(e.page_hashes) for e in stored) > 0
    assert any(e.lora_id == 1 for e in stored) and any(e.extra_keys for e in stored)
    expected = cached_multiset(m)
    assert expected, "the run ends with pages cached"
    rebuilt = Counter({(g, h): n for g, h, n in report["blocks"]})
    assert rebuilt == expected
