"""verikv's KV events on vLLM's wire, for KV-cache-aware routers (llm-d's KV indexer, Dynamo).

Needs the ``events`` extra (``pip install verikv[events]``: msgspec and pyzmq); importing
this module without them raises an ``ImportError`` that names the extra.

The wire format is vLLM 0.33's (``vllm/distributed/kv_events.py``, docs/events.md):

- a batch is a msgpack array ``[ts, events, data_parallel_rank]`` (the rank nil when unset);
- each event is a msgpack map tagged by ``"type"``: ``"BlockStored"`` with ``block_hashes``,
  ``parent_block_hash``, ``token_ids``, ``block_size``, ``lora_id``, ``medium``,
  ``lora_name`` always present and ``extra_keys``, ``group_idx``, ``kv_cache_spec_kind``,
  ``kv_cache_spec_sliding_window`` only when set (vLLM's later optional fields, ``locality``,
  ``ownership``, ``session_id``, ``lookahead_token_ids``, are declared and never set);
  ``"BlockRemoved"`` with ``block_hashes``, ``medium`` and ``group_idx`` when set;
  ``"AllBlocksCleared"`` with no field;
- a block hash is bytes, or with ``int_hashes=True`` its low 64 bits as an unsigned int
  (vLLM's ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``);
- extra keys are published untagged, one entry per block: ``("mm", hash, offset)`` becomes
  ``(hash, offset)``, any other tagged key its first value (``("lora", x, ...)`` becomes ``x``,
  ``("salt", s)`` becomes ``s``);
- on ZMQ, each batch is one PUB message of three frames ``[topic, seq, payload]``, ``seq``
  an 8-byte big-endian counter from 0; an optional ROUTER socket answers a request
  ``[start_seq]`` (8 bytes) with every buffered ``[topic, seq, payload]`` from ``start_seq``
  on, then ``[b"", -1 as 8 signed bytes, b""]``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from verikv.dp_sharding import checked_int
from verikv.errors import InvalidArgumentError, describe
from verikv.events import AllPagesCleared, KVEvent, PageRemoved, PageStored

try:
    import msgspec
    import zmq
except ImportError as _missing:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "verikv.kv_events needs the 'events' extra: pip install 'verikv[events]' (msgspec, pyzmq)") from _missing

#: the replay socket's end-of-replay sequence number
END_SEQ: bytes = (-1).to_bytes(8, "big", signed=True)
_INT_HASH_MASK = (1 << 64) - 1


# --- the wire schema (field names, order and options are vLLM 0.33's) ------------------------

class _WireBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class _WireEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """Tagged by class name under ``"type"``; encoded as a map."""


class BlockStored(_WireEvent):
    block_hashes: list[bytes | int]
    parent_block_hash: bytes | int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class BlockRemoved(_WireEvent):
    block_hashes: list[bytes | int]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(_WireEvent):
    pass


class KVEventBatch(_WireBatch):
    """A decoded batch: ``ts``, ``events`` and ``data_parallel_rank``."""

    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(KVEventBatch)


# --- verikv events -> wire events ----------------------------------------------------------

def _hash_out(value: bytes, int_hashes: bool) -> bytes | int:
    return int.from_bytes(value, "big") & _INT_HASH_MASK if int_hashes else value


def untagged_extra_keys(keys: Any) -> tuple[Any, ...] | None:
    """One page's extra keys as vLLM publishes them: a multimodal entry ``("mm", hash,
    offset)`` loses its tag, ``(hash, offset)``; any other tagged entry is reduced to its first
    value (``("lora", name, path)`` to ``name``, ``("salt", s)`` to ``s``), as vLLM's
    ``to_event_extra_keys`` does; an untagged entry stays as it is. No keys is ``None``."""
    if keys is None:
        return None
    if not isinstance(keys, tuple):
        return (keys,)
    out = [key if not (isinstance(key, tuple) and len(key) >= 2 and isinstance(key[0], str))
           else key[1:] if key[0] == "mm" else key[1] for key in keys]
    return tuple(out) if out else None


def to_wire_event(event: KVEvent, *, int_hashes: bool = False) -> BlockStored | BlockRemoved | AllBlocksCleared:
    """The vLLM wire record of one verikv event.

    Raises `InvalidArgumentError` for a `PageStored` without a page size (recorded through the
    bare `PagePool` API, which does not know it): vLLM's ``block_size`` is required.
    """
    if isinstance(event, PageStored):
        if event.page_size is None:
            raise InvalidArgumentError(
                "a PageStored without a page size (cached through the bare PagePool API) has no vLLM form")
        parent = event.parent_page_hash
        return BlockStored(
            block_hashes=[_hash_out(h, int_hashes) for h in event.page_hashes],
            parent_block_hash=None if parent is None else _hash_out(parent, int_hashes),
            token_ids=list(event.token_ids),
            block_size=event.page_size,
            lora_id=event.lora_id,
            medium=event.medium,
            lora_name=event.lora_name,
            extra_keys=None if event.extra_keys is None else [untagged_extra_keys(k) for k in event.extra_keys],
            group_idx=event.group_id,
            kv_cache_spec_kind=event.spec_kind,
            kv_cache_spec_sliding_window=event.sliding_window)
    if isinstance(event, PageRemoved):
        return BlockRemoved(block_hashes=[_hash_out(h, int_hashes) for h in event.page_hashes],
                            medium=event.medium, group_idx=event.group_id)
    if isinstance(event, AllPagesCleared):
        return AllBlocksCleared()
    raise InvalidArgumentError(f"not a KV event: {describe(event)}")


def encode_batch(events: Iterable[KVEvent], *, ts: float | None = None, data_parallel_rank: int | None = None,
                 int_hashes: bool = False) -> bytes:
    """One msgpack payload in vLLM's ``KVEventBatch`` form (``ts`` defaults to now)."""
    if data_parallel_rank is not None:
        data_parallel_rank = checked_int(data_parallel_rank, "data_parallel_rank", minimum=0)
    if not isinstance(int_hashes, bool):
        raise InvalidArgumentError(f"int_hashes must be a bool, got {describe(int_hashes)}")
    stamp = time.time() if ts is None else ts
    if not isinstance(stamp, (int, float)) or isinstance(stamp, bool):
        raise InvalidArgumentError(f"ts must be a float, got {describe(ts)}")
    wire = [to_wire_event(e, int_hashes=int_hashes) for e in events]
    return _ENCODER.encode(KVEventBatch(ts=float(stamp), events=wire, data_parallel_rank=data_parallel_rank))


def decode_batch(payload: bytes) -> KVEventBatch:
    """Decode one payload with vLLM's schema (unknown fields are ignored, as routers do).

    Raises `InvalidArgumentError` when the payload is not a KV event batch.
    """
    try:
        return _DECODER.decode(payload)
    except (msgspec.DecodeError, TypeError) as exc:
        raise InvalidArgumentError(f"not a KV event batch: {exc}") from None


# --- the publisher -------------------------------------------------------------------------

def _binds(endpoint: str) -> bool:
    """vLLM's rule: bind a wildcard, IPv6-any, ipc:// or inproc:// endpoint, connect otherwise."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


class ZmqEventPublisher:
    """Publishes event batches on a ZMQ PUB socket in vLLM's wire format.

    ``endpoint``: the PUB address (``tcp://*:5557`` binds, ``tcp://host:5557`` connects, as in
    vLLM; ``bind`` overrides the rule); ``replay_endpoint``: an optional ROUTER address
    (always bound) serving the last ``buffer_steps`` batches to a subscriber that missed some;
    ``topic``: the first frame of every message; ``data_parallel_rank``: stamped on every
    batch; ``int_hashes``: publish 64-bit int hashes instead of bytes.

    `publish` sends synchronously from the caller's thread, so batches leave in call order
    with consecutive sequence numbers; a daemon thread answers replay requests. Use as a
    context manager or call `close`.
    """

    def __init__(self, endpoint: str = "tcp://*:5557", *, replay_endpoint: str | None = None, topic: str = "",
                 buffer_steps: int = 10_000, hwm: int = 100_000, data_parallel_rank: int | None = None,
                 int_hashes: bool = False, bind: bool | None = None) -> None:
        for name, value in (("endpoint", endpoint), ("topic", topic)):
            if type(value) is not str:
                raise InvalidArgumentError(f"{name} must be a str, got {describe(value)}")
        if replay_endpoint is not None and type(replay_endpoint) is not str:
            raise InvalidArgumentError(f"replay_endpoint must be a str or None, got {describe(replay_endpoint)}")
        if (bind is not None and not isinstance(bind, bool)) or not isinstance(int_hashes, bool):
            raise InvalidArgumentError("bind must be a bool or None and int_hashes a bool")
        steps = checked_int(buffer_steps, "buffer_steps", minimum=1)
        water = checked_int(hwm, "hwm", minimum=0)
        self.data_parallel_rank: int | None = (None if data_parallel_rank is None
                                   else checked_int(data_parallel_rank, "data_parallel_rank", minimum=0))
        self.int_hashes: bool = int_hashes
        self._topic = topic.encode("utf-8")
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=steps)
        self._lock = threading.Lock()
        self._next_seq = 0
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(water)
        if _binds(endpoint) if bind is None else bind:
            self._pub.bind(endpoint)
        else:
            self._pub.connect(endpoint)
        #: the PUB address actually in use (a bound ``tcp://host:*`` shows its chosen port)
        self.endpoint: str = self._pub.getsockopt_string(zmq.LAST_ENDPOINT) or endpoint
        self.replay_endpoint: str | None = None
        self._stop = threading.Event()
        self._replay_thread: threading.Thread | None = None
        if replay_endpoint is not None:
            replay = self._ctx.socket(zmq.ROUTER)
            replay.bind(replay_endpoint)
            self.replay_endpoint = replay.getsockopt_string(zmq.LAST_ENDPOINT)
            self._replay_thread = threading.Thread(target=self._serve_replay, args=(replay,),
                                                   name="verikv-kv-events-replay", daemon=True)
            self._replay_thread.start()

    def __enter__(self) -> ZmqEventPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def next_seq(self) -> int:
        """The sequence number the next batch will carry (the number of batches sent so far)."""
        return self._next_seq

    def publish(self, events: Sequence[KVEvent], *, ts: float | None = None) -> int:
        """Send ``events`` as one batch; return its sequence number. An empty batch is sent too
        (a consumer can use it as a heartbeat or an end marker)."""
        if self._stop.is_set():
            raise InvalidArgumentError("the publisher is closed")
        payload = encode_batch(events, ts=ts, data_parallel_rank=self.data_parallel_rank, int_hashes=self.int_hashes)
        with self._lock:
            seq = self._next_seq
            self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
            self._buffer.append((seq, payload))
            self._next_seq = seq + 1
        return seq

    def publish_from(self, manager: Any, *, ts: float | None = None) -> int | None:
        """Drain ``manager.take_events()`` and publish them as one batch; ``None`` (nothing
        sent) when there were none."""
        events = manager.take_events()
        return self.publish(events, ts=ts) if events else None

    def close(self) -> None:
        """Stop the replay thread and close the sockets (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._replay_thread is not None:
            self._replay_thread.join()
        self._pub.close(linger=0)
        self._ctx.term()

    def _serve_replay(self, replay: zmq.Socket[bytes]) -> None:
        try:
            while not self._stop.is_set():
                if replay.poll(50):
                    self._answer_replay(replay, replay.recv_multipart())
        finally:
            replay.close(linger=0)

    def _answer_replay(self, replay: zmq.Socket[bytes], frames: list[bytes]) -> None:
        """Send every buffered batch from the requested sequence number on, then the end marker.
        A malformed request (not ``[client, b"", 8-byte seq]``) is ignored, as vLLM does."""
        if len(frames) != 3 or len(frames[2]) != 8:
            return
        client, start = frames[0], int.from_bytes(frames[2], "big")
        with self._lock:
            batches = [(seq, payload) for seq, payload in self._buffer if seq >= start]
        for seq, payload in batches:
            replay.send_multipart((client, b"", self._topic, seq.to_bytes(8, "big"), payload))
        replay.send_multipart((client, b"", b"", END_SEQ, b""))
