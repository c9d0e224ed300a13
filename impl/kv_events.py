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

import math
import numbers
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from verikv.dp_sharding import checked_int
from verikv.errors import InvalidArgumentError, describe
from verikv.events import AllPagesCleared, EventLog, KVEvent, PageRemoved, PageStored
from verikv.hashing import key_text, key_value

try:
    import msgspec
    import zmq
except ImportError as _missing:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "verikv.kv_events needs the 'events' extra: pip install 'verikv[events]' (msgspec, pyzmq)") from _missing

#: the replay socket's end-of-replay sequence number
END_SEQ: bytes = (-1).to_bytes(8, "big", signed=True)
_INT_HASH_MASK = (1 << 64) - 1
MAX_DATA_PARALLEL_RANK = 2**63 - 1
"""The largest ``data_parallel_rank``: a signed 64-bit int, which every msgpack reader decodes."""
MAX_WIRE_NESTING = 64
"""The deepest container nesting `decode_batch` reads. A batch nests five containers around one
extra key (batch, events, event, extra keys, the page's keys) and a key at most
`verikv.hashing.MAX_KEY_DEPTH` more; the bound is checked before msgspec decodes, whose
recursion could otherwise exhaust the C stack when a caller has raised the recursion limit."""
MAX_HWM = 2**31 - 1
"""The largest high-water mark: libzmq stores it in a C int."""
TRANSPORTS = frozenset({"tcp", "ipc", "inproc", "pgm", "epgm", "vmci", "udp", "ws", "wss", "tipc", "norm"})
"""The transports an endpoint may name (libzmq's); whether this build supports one is up to it."""


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
    keys = key_value(keys, "extra keys")  # exact builtins (typed error otherwise), lists as tuples
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
    return _wire_event(event, _checked_flag(int_hashes))


def _checked_flag(int_hashes: object) -> bool:
    if not isinstance(int_hashes, bool):
        raise InvalidArgumentError(f"int_hashes must be a bool, got {describe(int_hashes)}")
    return int_hashes


def _wire_event(event: KVEvent, int_hashes: bool) -> BlockStored | BlockRemoved | AllBlocksCleared:
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
    """One msgpack payload in vLLM's ``KVEventBatch`` form (``ts`` defaults to now).

    Raises `InvalidArgumentError` for anything that is not an iterable of verikv events, a
    ``ts`` that is not a finite real number, a rank outside ``0..MAX_DATA_PARALLEL_RANK``, or
    an event msgpack cannot hold (an extra key with an int beyond 64 bits).
    """
    rank = _checked_rank(data_parallel_rank)
    flag = _checked_flag(int_hashes)
    stamp = time.time() if ts is None else _checked_ts(ts)
    wire = [_wire_event(e, flag) for e in _event_list(events)]
    try:
        return _ENCODER.encode(KVEventBatch(ts=stamp, events=wire, data_parallel_rank=rank))
    except (msgspec.EncodeError, OverflowError, TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"the events cannot be put on the wire: {exc}") from None


def _checked_rank(rank: object) -> int | None:
    return None if rank is None else checked_int(rank, "data_parallel_rank", minimum=0,
                                                 maximum=MAX_DATA_PARALLEL_RANK)


def _checked_ts(ts: object) -> float:
    """``ts`` as a finite float (an int, a float or a NumPy real; not a bool)."""
    if isinstance(ts, bool) or not isinstance(ts, numbers.Real):  # (NumPy's bool is no Real)
        raise InvalidArgumentError(f"ts must be a float, got {describe(ts)}")
    try:
        stamp = float(ts)
    except (OverflowError, ValueError, TypeError):
        stamp = math.inf  # an int beyond a float's range: refused below like an infinity
    if not math.isfinite(stamp):
        raise InvalidArgumentError(f"ts must be a finite number of seconds, got {describe(ts)}")
    return stamp


def _event_list(events: object) -> list[Any]:
    """``events`` (an iterable of events, not a str, bytes or mapping) as a list."""
    if isinstance(events, (str, bytes, bytearray, Mapping)) or not isinstance(events, Iterable):
        raise InvalidArgumentError(f"events must be an iterable of KV events, got {describe(events)}")
    try:
        return list(events)
    except Exception as exc:  # an iterator that fails: the caller's object, reported as a bad argument
        raise InvalidArgumentError(f"events could not be iterated: {type(exc).__name__}: {exc}") from None


def decode_batch(payload: bytes | bytearray | memoryview) -> KVEventBatch:
    """Decode one payload with vLLM's schema (unknown fields are ignored, as routers do).

    Raises `InvalidArgumentError` when the payload is not a KV event batch: not bytes, not
    msgpack (truncated, garbage, invalid UTF-8 in a string), not vLLM's schema, or nested
    deeper than `MAX_WIRE_NESTING` containers.
    """
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"a payload is bytes, got {describe(payload)}")
    data = payload if isinstance(payload, bytes) else bytes(payload)
    if _nests_deeper_than(data, MAX_WIRE_NESTING):
        raise InvalidArgumentError(f"not a KV event batch: containers nested deeper than {MAX_WIRE_NESTING}")
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, TypeError, ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise InvalidArgumentError(f"not a KV event batch: {exc}") from None


# --- the nesting pre-scan ------------------------------------------------------------------

#: first bytes of a msgpack container: fixmap, fixarray, array 16/32, map 16/32
_CONTAINER_LEADS = bytes(range(0x80, 0xA0)) + b"\xdc\xdd\xde\xdf"


def _lead_shapes() -> tuple[tuple[int, int, int, int] | None, ...]:
    """For each first byte of a msgpack value: (bytes to skip after it, width of a big-endian
    length that follows, what one length unit is: 0 a byte, 1 an array item, 2 a map pair,
    items it opens by itself); ``None`` for 0xc1, which msgpack never uses."""
    shapes: list[tuple[int, int, int, int] | None] = []
    for lead in range(256):
        if lead < 0x80 or lead >= 0xE0:  # fixint
            shapes.append((0, 0, 0, 0))
        elif lead < 0x90:  # fixmap
            shapes.append((0, 0, 0, 2 * (lead & 0x0F)))
        elif lead < 0xA0:  # fixarray
            shapes.append((0, 0, 0, lead & 0x0F))
        elif lead < 0xC0:  # fixstr
            shapes.append((lead & 0x1F, 0, 0, 0))
        else:
            shapes.append(_LONG_SHAPES[lead - 0xC0])
    return tuple(shapes)


_LONG_SHAPES: tuple[tuple[int, int, int, int] | None, ...] = (
    (0, 0, 0, 0), None, (0, 0, 0, 0), (0, 0, 0, 0),      # nil, (never used), false, true
    (0, 1, 0, 0), (0, 2, 0, 0), (0, 4, 0, 0),            # bin 8/16/32
    (1, 1, 0, 0), (1, 2, 0, 0), (1, 4, 0, 0),            # ext 8/16/32 (a type byte, then the data)
    (4, 0, 0, 0), (8, 0, 0, 0),                          # float 32/64
    (1, 0, 0, 0), (2, 0, 0, 0), (4, 0, 0, 0), (8, 0, 0, 0),  # uint 8..64
    (1, 0, 0, 0), (2, 0, 0, 0), (4, 0, 0, 0), (8, 0, 0, 0),  # int 8..64
    (2, 0, 0, 0), (3, 0, 0, 0), (5, 0, 0, 0), (9, 0, 0, 0), (17, 0, 0, 0),  # fixext 1..16
    (0, 1, 0, 0), (0, 2, 0, 0), (0, 4, 0, 0),            # str 8/16/32
    (0, 2, 1, 0), (0, 4, 1, 0), (0, 2, 2, 0), (0, 4, 2, 0),  # array 16/32, map 16/32
)
_LEAD_SHAPES = _lead_shapes()


def _nests_deeper_than(data: bytes, limit: int) -> bool:
    """Whether the first msgpack value in ``data`` opens more than ``limit`` nested containers.

    Iterative, so it reads any depth in constant stack. Malformed or truncated input answers
    False: the decoder then reports what is wrong with it.
    """
    if len(data) - len(data.translate(None, _CONTAINER_LEADS)) <= limit:
        return False  # fewer container headers than the limit: no value can nest deeper
    shapes = _LEAD_SHAPES
    open_items: list[int] = []  # items still to read in each open container, innermost last
    i, end = 0, len(data)
    while i < end:
        shape = shapes[data[i]]
        if shape is None:
            return False
        skip, width, per_unit, items = shape
        i += 1
        if width:
            length = int.from_bytes(data[i:i + width], "big")
            i += width
            if per_unit:
                items = length * per_unit
            else:
                skip += length
        i += skip
        if items:
            open_items.append(items)
            if len(open_items) > limit:
                return True
            continue
        while open_items:  # one value read: it completes the containers it ends
            open_items[-1] -= 1
            if open_items[-1]:
                break
            open_items.pop()
        if not open_items:
            return False  # the top-level value is complete
    return False


# --- the publisher -------------------------------------------------------------------------

def _binds(endpoint: str) -> bool:
    """vLLM's rule: bind a wildcard, IPv6-any, ipc:// or inproc:// endpoint, connect otherwise."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


def _checked_endpoint(value: object, what: str) -> str:
    """``transport://address``: an exact str, UTF-8 encodable, no NUL, a `TRANSPORTS` name."""
    if type(value) is not str:
        raise InvalidArgumentError(f"{what} must be a str, got {describe(value)}")
    text = key_text(value, what)
    transport, sep, address = text.partition("://")
    if not sep or not address or "\x00" in text or transport not in TRANSPORTS:
        raise InvalidArgumentError(
            f"{what} must be 'transport://address' with a transport of {sorted(TRANSPORTS)}, got {describe(value)}")
    return text


class ZmqEventPublisher:
    """Publishes event batches on a ZMQ PUB socket in vLLM's wire format.

    ``endpoint``: the PUB address (``tcp://*:5557`` binds, ``tcp://host:5557`` connects, as in
    vLLM; ``bind`` overrides the rule); ``replay_endpoint``: an optional ROUTER address
    (always bound) serving the last ``buffer_steps`` batches to a subscriber that missed some;
    ``topic``: the first frame of every message; ``hwm``: the PUB socket's send high-water mark
    (``0..MAX_HWM``, 0 for none); ``data_parallel_rank``: stamped on every batch
    (``0..MAX_DATA_PARALLEL_RANK``); ``int_hashes``: publish 64-bit int hashes instead of bytes.

    Every argument is checked before a socket is opened; an endpoint that cannot be bound or
    connected (in use, a missing ``ipc`` directory, a transport this libzmq lacks) raises
    `InvalidArgumentError` after the sockets and the context opened so far are closed. A
    publisher that is garbage-collected or still open at interpreter exit is closed the same
    way first, so neither can wait in libzmq's context termination.

    `publish` sends synchronously from the caller's thread, so batches leave in call order
    with consecutive sequence numbers; a daemon thread answers replay requests. Use as a
    context manager or call `close`.
    """

    def __init__(self, endpoint: str = "tcp://*:5557", *, replay_endpoint: str | None = None, topic: str = "",
                 buffer_steps: int = 10_000, hwm: int = 100_000, data_parallel_rank: int | None = None,
                 int_hashes: bool = False, bind: bool | None = None) -> None:
        endpoint = _checked_endpoint(endpoint, "endpoint")
        replay = None if replay_endpoint is None else _checked_endpoint(replay_endpoint, "replay_endpoint")
        if type(topic) is not str:
            raise InvalidArgumentError(f"topic must be a str, got {describe(topic)}")
        topic_frame = key_text(topic, "topic").encode("utf-8")
        if (bind is not None and not isinstance(bind, bool)) or not isinstance(int_hashes, bool):
            raise InvalidArgumentError("bind must be a bool or None and int_hashes a bool")
        steps = checked_int(buffer_steps, "buffer_steps", minimum=1, maximum=sys.maxsize)
        water = checked_int(hwm, "hwm", minimum=0, maximum=MAX_HWM)
        self.data_parallel_rank: int | None = _checked_rank(data_parallel_rank)
        self.int_hashes: bool = int_hashes
        self._next_seq = 0
        ctx, pub, replay_socket = _open_sockets(endpoint, _binds(endpoint) if bind is None else bind, water, replay)
        self._channel = _Channel(ctx, pub, replay_socket, topic_frame, steps)
        # (the finalizer holds the channel, never the publisher: it runs when the publisher is collected)
        self._release = weakref.finalize(self, self._channel.release)
        #: the PUB address actually in use (a bound ``tcp://host:*`` shows its chosen port)
        self.endpoint: str = pub.getsockopt_string(zmq.LAST_ENDPOINT) or endpoint
        self.replay_endpoint: str | None = (None if replay_socket is None
                                            else replay_socket.getsockopt_string(zmq.LAST_ENDPOINT))
        try:
            self._channel.start()
        except BaseException:  # no thread (resources exhausted): release the sockets before raising
            self._release()
            raise

    def __enter__(self) -> ZmqEventPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def next_seq(self) -> int:
        """The sequence number the next batch will carry (the number of batches sent so far)."""
        return self._next_seq

    def publish(self, events: Iterable[KVEvent], *, ts: float | None = None) -> int:
        """Send ``events`` as one batch; return its sequence number. An empty batch is sent too
        (a consumer can use it as a heartbeat or an end marker). `InvalidArgumentError` (and
        nothing sent) for what `encode_batch` refuses or a closed publisher."""
        self._check_open()
        return self._send(self._encode(events, ts))

    def publish_from(self, manager: Any, *, ts: float | None = None) -> int | None:
        """Drain ``manager.take_events()`` (a `CacheManager`, a `PagePool`, or any object with
        that method) and publish the events as one batch; ``None`` (nothing sent) when there
        were none.

        A `CacheManager` or `PagePool` is drained only once its events are encoded, so a refused
        call leaves them in its log (a bare pool's `PageStored` has no page size, which vLLM's
        wire requires). Any other object is drained first: its events are lost if they cannot
        be published.
        """
        take = getattr(manager, "take_events", None)
        if not callable(take):
            raise InvalidArgumentError(f"publish_from needs an object with take_events(), got {describe(manager)}")
        self._check_open()
        stamp = time.time() if ts is None else _checked_ts(ts)
        log = _event_log_of(manager)
        if log is not None:
            events = log.peek()
            payload = self._encode(events, stamp) if events else b""
            take()
        else:
            events = take()
            payload = self._encode(events, stamp) if events else b""
        return self._send(payload) if events else None

    def close(self) -> None:
        """Stop the replay thread and close the sockets (idempotent)."""
        self._release()

    def _check_open(self) -> None:
        if not self._release.alive:
            raise InvalidArgumentError("the publisher is closed")

    def _encode(self, events: Iterable[KVEvent], ts: float | None) -> bytes:
        return encode_batch(events, ts=ts, data_parallel_rank=self.data_parallel_rank, int_hashes=self.int_hashes)

    def _send(self, payload: bytes) -> int:
        """Send one encoded batch under the next sequence number, which it returns."""
        seq = self._next_seq
        if not self._channel.send(seq, payload):
            raise InvalidArgumentError("the publisher is closed")
        self._next_seq = seq + 1
        return seq


class _Channel:
    """A publisher's context, sockets, replay buffer and replay thread: everything `release`
    must close, held apart from the publisher so that its finalizer can hold them."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], pub: zmq.Socket[bytes],
                 replay: zmq.Socket[bytes] | None, topic: bytes, buffer_steps: int) -> None:
        self.ctx = ctx
        self.pub = pub
        self.topic = topic
        self.buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.replay_thread = None if replay is None else threading.Thread(
            target=self._serve_replay, args=(replay,), name="verikv-kv-events-replay", daemon=True)
        self._replay = replay  # closed by its thread, or by `release` when the thread never started

    def start(self) -> None:
        if self.replay_thread is not None:
            self.replay_thread.start()

    def send(self, seq: int, payload: bytes) -> bool:
        """Send and buffer one batch; False when the channel is already released."""
        with self.lock:
            if self.stop.is_set():
                return False
            self.pub.send_multipart((self.topic, seq.to_bytes(8, "big"), payload))
            self.buffer.append((seq, payload))
        return True

    def release(self) -> None:
        """Stop the replay thread, close every socket (linger 0) and terminate the context."""
        with self.lock:
            self.stop.set()
        if self.replay_thread is not None and self.replay_thread.is_alive():
            self.replay_thread.join()
        elif self._replay is not None:
            self._replay.close(linger=0)
        with self.lock:
            self.pub.close(linger=0)
        self.ctx.term()

    def _serve_replay(self, replay: zmq.Socket[bytes]) -> None:
        try:
            while not self.stop.is_set():
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
        with self.lock:
            batches = [(seq, payload) for seq, payload in self.buffer if seq >= start]
        for seq, payload in batches:
            replay.send_multipart((client, b"", self.topic, seq.to_bytes(8, "big"), payload))
        replay.send_multipart((client, b"", b"", END_SEQ, b""))


def _event_log_of(source: object) -> EventLog | None:
    """The `EventLog` a verikv `CacheManager` or `PagePool` drains in ``take_events``, if any."""
    from verikv.cache_manager import CacheManager
    from verikv.page_pool import PagePool

    pool = source.page_pool if isinstance(source, CacheManager) else source
    return pool.event_log if isinstance(pool, PagePool) else None


def _open_sockets(endpoint: str, bind: bool, hwm: int,
                  replay_endpoint: str | None) -> tuple[zmq.Context[zmq.Socket[bytes]], zmq.Socket[bytes],
                                                          zmq.Socket[bytes] | None]:
    """A new context, its PUB socket bound or connected to ``endpoint`` and, when asked, a ROUTER
    socket bound to ``replay_endpoint``. On any failure everything opened so far is closed
    (linger 0) and the context terminated before the error leaves: a `zmq.ZMQError` (an address
    in use, a missing ``ipc`` directory) as `InvalidArgumentError`."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    ctx.setsockopt(zmq.LINGER, 0)  # a publisher dropped without `close` never holds up the context's end
    opened: list[zmq.Socket[bytes]] = []
    current = endpoint
    try:
        pub = ctx.socket(zmq.PUB)
        opened.append(pub)
        pub.set_hwm(hwm)
        (pub.bind if bind else pub.connect)(endpoint)
        if replay_endpoint is None:
            return ctx, pub, None
        current = replay_endpoint
        replay = ctx.socket(zmq.ROUTER)
        opened.append(replay)
        replay.bind(replay_endpoint)
        return ctx, pub, replay
    except BaseException as exc:
        for socket in opened:
            socket.close(linger=0)
        ctx.term()
        if isinstance(exc, zmq.ZMQError):
            raise InvalidArgumentError(f"cannot open {describe(current)}: {exc}") from None
        raise
