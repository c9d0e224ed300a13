"""Hostile cases for KV events: the wire format, the ZMQ publisher and the event API.

``CASES`` is a list of `hostile.Case` for the hostile suite:

* **the wire** (``kv_events.decode_batch[...]``): valid batches (accepted), every proper prefix
  of one (refused), invalid UTF-8 in each string field, nesting around and far past
  `verikv.kv_events.MAX_WIRE_NESTING` in extra keys, unknown fields and extra items, headers
  claiming 2**32 items, and a seeded fuzz family: random bytes and mutations of valid batches
  (bit flips, overwritten, inserted and deleted bytes, truncations, container headers spliced
  in). Their outcome must be a decoded batch or an `InvalidArgumentError`: never another
  exception, never a hang;
* **encoding** (``kv_events.encode_batch``, ``to_wire_event``, ``untagged_extra_keys``): every
  hostile value in each parameter;
* **the publisher** (``kv_events.ZmqEventPublisher`` and its methods): each argument,
  endpoints that are malformed, name a missing ``ipc`` directory or an address in use, and a
  `PagePool` whose events cannot be published (``publish_from`` must leave them in its log).
  Every publisher a case opens is closed by the case;
* **the event API** (``events.EventLog`` and its methods, ``StoreContext``, ``describe_run``,
  ``spec_metadata``, ``split_group``, ``wire_hash``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
from hostile import HOSTILE, Case, P, W, World, resolve, substitution_cases

from verikv import CacheManager, FullAttentionSpec, PagePool, Request
from verikv.cache_specs import CacheGroupSpec
from verikv.events import (
    AllPagesCleared,
    EventLog,
    KVEvent,
    PageRemoved,
    PageStored,
    StoreContext,
    describe_run,
    spec_metadata,
    split_group,
    wire_hash,
)
from verikv.kv_events import (
    MAX_WIRE_NESTING,
    ZmqEventPublisher,
    decode_batch,
    encode_batch,
    to_wire_event,
    untagged_extra_keys,
)

SEED = 20_260_428
"""The fuzz family's seed: the same payloads on every run."""
RANDOM_PAYLOADS = 1000
MUTATED_PAYLOADS = 2000

H1, H2 = bytes(range(32)), bytes(range(1, 33))
STORED = PageStored((H1, H2), b"\xff" * 32, tuple(range(1000, 1008)), 4, 1, 7, "adapter",
                    ((("lora", "adapter"), ("salt", "t")), (("lora", "adapter"), ("mm", b"img", 2))),
                    page_ids=(3, 4), spec_kind="sliding_window", sliding_window=8)
EVENTS: tuple[KVEvent, ...] = (STORED, PageRemoved((H1,), 1, page_ids=(3,)), AllPagesCleared())
FULL_SPEC = FullAttentionSpec(page_size=4, num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)
ALL = frozenset(HOSTILE)
UNHASHABLE = frozenset({"list", "empty_list", "ragged", "nested", "dict", "np_array", "np_array2d", "np_array0d"})
TIMESTAMPS = frozenset({"None", "zero", "neg1", "2**31", "2**63", "10**100", "-10**100", "1.5", "2.0", "np_int",
                        "np_neg", "np_float", "hashflip_int"})
"""Finite real numbers (and None: now) are timestamps."""
RANKS = dict(accept={"2**31", "np_int", "hashflip_int"}, reject={"2**63", "10**100"})
"""A data-parallel rank up to 2**63 - 1 (a signed 64-bit msgpack int)."""
EXTRA_KEY_VALUES = frozenset({"None", "True", "False", "zero", "neg1", "2**31", "2**63", "10**100", "-10**100", "1.5",
                              "2.0", "inf", "-inf", "np_int", "np_neg", "np_float", "str", "empty_str", "bytes",
                              "list", "empty_list", "ragged", "hashflip_str", "hashflip_int"})
"""Extra keys of builtin immutable values (lists become tuples, subclasses their exact builtins)."""


def empty_world() -> World:
    return {}


# --- the wire -------------------------------------------------------------------------------------

def valid_payloads() -> dict[str, bytes]:
    """Batches a router may receive: verikv's own in both hash forms, empty, each kind alone."""
    return {
        "all kinds": encode_batch(EVENTS, ts=12.5, data_parallel_rank=2),
        "int hashes": encode_batch(EVENTS, ts=0.0, int_hashes=True),
        "empty": encode_batch([], ts=1.0),
        "stored": encode_batch(EVENTS[:1], ts=1.0),
        "removed and cleared": encode_batch(EVENTS[1:], ts=1.0, data_parallel_rank=0),
    }


def _stored_map(**fields: Any) -> dict[str, Any]:
    return {"type": "BlockStored", "block_hashes": [H1], "parent_block_hash": None, "token_ids": [1],
            "block_size": 1, "lora_id": None, "medium": "GPU", "lora_name": None, **fields}


def _batch(*events: Any) -> bytes:
    return msgspec.msgpack.encode([1.0, list(events), None])


def _nested_extra_key(depth: int) -> bytes:
    """A batch whose one extra key nests ``depth`` arrays (besides the batch's own four)."""
    marker = "NESTED-HERE"
    payload = _batch(_stored_map(extra_keys=[[marker]]))
    return payload.replace(msgspec.msgpack.encode(marker), b"\x91" * depth + b"\x00")


def _invalid_utf8(field: str) -> bytes:
    """A batch whose string ``field`` holds bytes that are not UTF-8 (same length, 0xff bytes)."""
    text = {"type": "BlockStored", "medium": "GPU", "lora_name": "lora", "kv_cache_spec_kind": "full"}[field]
    payload = _batch(_stored_map(lora_name="lora", kv_cache_spec_kind="full"))
    encoded = msgspec.msgpack.encode(text)
    return payload.replace(encoded, encoded[:1] + b"\xff" * len(text), 1)


def crafted_payloads() -> dict[str, tuple[bytes, str]]:
    """Name -> (payload, expectation) for the shapes a hostile sender would try first."""
    cases: dict[str, tuple[bytes, str]] = {}
    for field in ("type", "medium", "lora_name", "kv_cache_spec_kind"):
        cases[f"invalid UTF-8 in {field}"] = (_invalid_utf8(field), "reject")
    # the batch, its events, the event, its extra keys and the page's entry are five levels
    for depth in (MAX_WIRE_NESTING - 6, MAX_WIRE_NESTING - 5):
        cases[f"extra key nested {depth} deep"] = (_nested_extra_key(depth), "accept")
    for depth in (MAX_WIRE_NESTING - 4, 1000, 100_000):
        cases[f"extra key nested {depth} deep"] = (_nested_extra_key(depth), "reject")
    deep_unknown = _batch(_stored_map(unknown_field="HERE")).replace(msgspec.msgpack.encode("HERE"),
                                                                    b"\x91" * 5000 + b"\xc0")
    cases["unknown field nested 5000 deep"] = (deep_unknown, "reject")
    cases["unknown field"] = (_batch(_stored_map(session_tag="x", future=[1, {"a": b"b"}])), "accept")
    cases["fourth batch item"] = (msgspec.msgpack.encode([1.0, [], None, [1, 2]]), "either")
    cases["events claim 2**32-1 items"] = (b"\x93\xcb" + bytes(8) + b"\xdd\xff\xff\xff\xff", "reject")
    cases["token ids claim 2**31 items"] = (_batch(_stored_map(token_ids="T")).replace(
        msgspec.msgpack.encode("T"), b"\xdd\x80\x00\x00\x00"), "reject")
    cases["trailing bytes"] = (encode_batch(EVENTS, ts=1.0) + b"\x00", "reject")
    cases["empty"] = (b"", "reject")
    cases["never-used byte 0xc1"] = (b"\xc1", "reject")
    cases["unknown event type"] = (_batch({"type": "BlockEvicted"}), "reject")
    cases["negative block size"] = (_batch(_stored_map(block_size=-1)), "accept")  # a decoder reads, never judges
    cases["rank 2**64-1"] = (msgspec.msgpack.encode([1.0, [], 2**64 - 1]), "accept")
    return cases


def _mutate(payload: bytes, rng: random.Random) -> bytes:
    """One to three random edits of ``payload``."""
    data = bytearray(payload)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data) + 1)
        edit = rng.randrange(7)
        if edit == 0 and data:  # flip one bit
            data[at % len(data)] ^= 1 << rng.randrange(8)
        elif edit == 1 and data:  # overwrite with any byte
            data[at % len(data)] = rng.randrange(256)
        elif edit == 2:  # insert random bytes
            data[at:at] = rng.randbytes(rng.randint(1, 8))
        elif edit == 3:  # delete a slice
            del data[at:at + rng.randint(1, 8)]
        elif edit == 4:  # truncate
            del data[at:]
        elif edit == 5:  # splice in container headers (deep or huge claims)
            data[at:at] = rng.choice([b"\x91" * rng.randint(1, 200), b"\xdd\xff\xff\xff\xff", b"\xdf\x7f\xff\xff\xff",
                                      b"\x9f", b"\x8f", b"\xdb\xff\xff\xff\xff"])
        elif data:  # overwrite with a string header of a wrong length
            data[at % len(data)] = rng.choice([0xA0 | rng.randrange(32), 0xD9, 0xC4, 0xC1])
    return bytes(data)


def fuzz_payloads() -> list[tuple[str, bytes]]:
    """The seeded fuzz family: random byte strings, then mutations of the valid batches."""
    rng = random.Random(SEED)
    out = []
    for i in range(RANDOM_PAYLOADS):
        head = rng.choice([b"", b"\x93", b"\x93\xcb" + rng.randbytes(8), b"\x93\xcb" + bytes(8) + b"\x91"])
        out.append((f"random {i:04d}", head + rng.randbytes(rng.randint(0, 96))))
    bases = list(valid_payloads().values())
    for i in range(MUTATED_PAYLOADS):
        out.append((f"mutated {i:04d}", _mutate(rng.choice(bases), rng)))
    return out


def _decode(payload: bytes) -> Callable[[World], Any]:
    return lambda w: decode_batch(payload)


def wire_cases() -> list[Case]:
    name = "kv_events.decode_batch"
    cases = [Case(f"{name}[valid {k}]", empty_world, _decode(v), "accept") for k, v in valid_payloads().items()]
    full = valid_payloads()["all kinds"]
    cases += [Case(f"{name}[prefix of {n} bytes]", empty_world, _decode(full[:n]), "reject") for n in range(len(full))]
    cases += [Case(f"{name}[{k}]", empty_world, _decode(v), expect) for k, (v, expect) in crafted_payloads().items()]
    cases += [Case(f"{name}[fuzz {k}]", empty_world, _decode(v), "either") for k, v in fuzz_payloads()]
    cases += substitution_cases(name, empty_world, lambda w, **k: decode_batch(**k),
                                {"payload": P(lambda: valid_payloads()["stored"], "object", either={"bytes"})})
    return cases


# --- encoding -------------------------------------------------------------------------------------

def encoding_cases() -> list[Case]:
    cases = substitution_cases("kv_events.encode_batch", empty_world, lambda w, **k: encode_batch(**k), dict(
        events=P(lambda: list(EVENTS), "ids", reject={"list", "np_array"}),
        ts=P(1.0, "object", accept=TIMESTAMPS),
        data_parallel_rank=P(None, "opt_count0", **RANKS),
        int_hashes=P(False, "bool", reject={"np_bool"})))
    cases += substitution_cases("kv_events.to_wire_event", empty_world, lambda w, **k: to_wire_event(**k), dict(
        event=P(STORED, "object"), int_hashes=P(False, "bool", reject={"np_bool"})))
    cases += substitution_cases("kv_events.untagged_extra_keys", empty_world,
                                lambda w, **k: untagged_extra_keys(**k),
                                dict(keys=P((("mm", b"h", 2),), "object", accept=EXTRA_KEY_VALUES)))
    cases += [
        Case("kv_events.encode_batch[an extra key of 2**64]", empty_world,
             lambda w: encode_batch([PageStored((H1,), None, (1,), 1, extra_keys=((2**64,),))], ts=1.0), "reject"),
        Case("kv_events.encode_batch[a bare pool's PageStored]", empty_world,
             lambda w: encode_batch([PageStored((H1,))], ts=1.0), "reject"),
        Case("kv_events.encode_batch[an iterator that fails]", empty_world,
             lambda w: encode_batch(_failing_iterator(), ts=1.0), "reject"),
    ]
    return cases


def _failing_iterator() -> Any:
    yield EVENTS[0]
    raise RuntimeError("the events' iterator failed")


# --- the publisher --------------------------------------------------------------------------------

def _open_and_close(world: World, **kwargs: Any) -> None:
    ZmqEventPublisher(**kwargs).close()


def _bound_world() -> World:
    """An open publisher bound to a TCP port chosen by the system, with a replay socket."""
    return dict(held=ZmqEventPublisher("tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*"))


def _closing(act: Callable[..., Any]) -> Callable[..., Any]:
    """``act``, then every publisher of the world closed (the snapshot ignores whether it is)."""
    def run(world: World, **kwargs: Any) -> Any:
        try:
            return act(world, **kwargs)
        finally:
            for value in world.values():
                if isinstance(value, ZmqEventPublisher):
                    value.close()
    return run


def _publisher_world() -> World:
    """An open publisher; a manager and a bare pool that recorded events (the pool's
    `PageStored` has no page size, so vLLM's wire cannot carry it)."""
    manager = CacheManager(16, [CacheGroupSpec(FULL_SPEC)], 64, enable_kv_events=True)
    manager.allocate_slots(Request("r", list(range(9))), 9)
    pool = PagePool(8, enable_kv_events=True)
    pool.cache_page_id(pool.get_new_page_ids(1)[0], "k")
    return dict(pub=ZmqEventPublisher("inproc://verikv-hostile-events"), m=manager, pool=pool,
                quiet=PagePool(8, enable_kv_events=True))


def publisher_cases() -> list[Case]:
    name = "kv_events.ZmqEventPublisher"
    cases = substitution_cases(name, empty_world, _open_and_close, dict(
        endpoint=P("inproc://verikv-hostile", "object"),
        replay_endpoint=P(None, "object", accept={"None"}),
        topic=P("kv", "object", accept={"str", "empty_str"}),
        buffer_steps=P(4, "count1", accept={"2**31", "np_int", "hashflip_int"}, reject={"2**63", "10**100"}),
        hwm=P(16, "count0", accept={"np_int", "hashflip_int"}, reject={"2**31", "2**63", "10**100"}),
        data_parallel_rank=P(None, "opt_count0", **RANKS),
        int_hashes=P(False, "bool", reject={"np_bool"}),
        bind=P(None, "object", accept={"None", "True", "False"})))
    for endpoint, expect in (("bogus://x", "reject"), ("", "reject"), ("tcp://", "reject"), ("inproc", "reject"),
                             ("inproc://a\x00b", "reject"), ("ipc:///nonexistent-verikv-dir/socket", "reject"),
                             ("tcp://127.0.0.1:*", "accept"), ("inproc://a", "accept")):
        cases.append(Case(f"{name}[endpoint={endpoint!r}]", empty_world,
                          lambda w, e=endpoint: _open_and_close(w, endpoint=e), expect))  # type: ignore[misc]
        cases.append(Case(f"{name}[replay_endpoint={endpoint!r}]", empty_world,
                          lambda w, e=endpoint: _open_and_close(w, endpoint="inproc://pub",  # type: ignore[misc]
                                                                replay_endpoint=e), expect))
    cases += [
        Case(f"{name}[inproc, hwm=2**31]", empty_world, lambda w: _open_and_close(w, endpoint="inproc://a", hwm=2**31),
             "reject"),
        Case(f"{name}[endpoint in use]", _bound_world, _closing(lambda w: _open_and_close(
            w, endpoint=w["held"].endpoint, bind=True)), "reject"),
        Case(f"{name}[replay endpoint in use]", _bound_world, _closing(lambda w: _open_and_close(
            w, endpoint="tcp://127.0.0.1:*", replay_endpoint=w["held"].replay_endpoint)), "reject"),
    ]
    cases += substitution_cases(f"{name}.publish", _publisher_world,
                                _closing(lambda w, **k: w["pub"].publish(**k)), dict(
                                    events=P(lambda: list(EVENTS), "ids", reject={"list", "np_array"}),
                                    ts=P(None, "object", accept=TIMESTAMPS)))
    cases += substitution_cases(f"{name}.publish_from", _publisher_world,
                                _closing(lambda w, **k: w["pub"].publish_from(**resolve(w, k))), dict(
                                    manager=P(W("m"), "object"), ts=P(None, "object", accept=TIMESTAMPS)))
    cases += [
        Case(f"{name}.publish_from[a pool whose events have no vLLM form]", _publisher_world,
             _closing(lambda w: w["pub"].publish_from(w["pool"])), "reject"),
        Case(f"{name}.publish_from[a pool without events]", _publisher_world,
             _closing(lambda w: w["pub"].publish_from(w["quiet"])), "accept"),
        Case(f"{name}.close[]", _publisher_world, _closing(lambda w: w["pub"].close()), "accept"),
        Case(f"{name}.publish[after close]", _publisher_world,
             _closing(lambda w: (w["pub"].close(), w["pub"].publish([]))), "reject"),
        Case(f"{name}.publish_from[after close]", _publisher_world,
             _closing(lambda w: (w["pub"].close(), w["pub"].publish_from(w["m"]))), "reject"),
    ]
    return cases


# --- the event API --------------------------------------------------------------------------------

def _log_world() -> World:
    """An event log inside a manager call, holding one store report; a request to describe."""
    log = EventLog()
    log.begin_call()
    log.stored(3, b"k" * 32)
    return dict(log=log, idle=EventLog(), r=Request("r", list(range(12))))


def _context(**fields: Any) -> StoreContext:
    return StoreContext(**{"page_size": 4, "parent_key": None, "token_ids": (1, 2, 3, 4), **fields})


def event_api_cases() -> list[Case]:
    cases: list[Case] = []

    def method(name: str) -> Callable[..., Any]:
        return lambda w, **k: getattr(w["log"], name)(**resolve(w, k))

    cases += substitution_cases("events.EventLog", empty_world, lambda w, **k: EventLog(**k),
                                {"medium": P("GPU", "object", accept={"str", "empty_str"})})
    for report in ("stored", "removed"):
        cases += substitution_cases(f"events.EventLog.{report}", _log_world, method(report), dict(
            page_id=P(5, "count1", accept={"2**31", "2**63", "10**100", "np_int", "hashflip_int"}),
            key=P(b"x" * 32, "key", accept={"nan", "hashflip_str", "hashflip_int"}, reject={"None"})))
    cases += substitution_cases("events.EventLog.set_store_context", _log_world, method("set_store_context"),
                                {"describe": P(None, "object", accept={"None", "callable"})})
    cases += substitution_cases("events.EventLog.recording", _log_world, method("recording"), dict(
        method=P(lambda: (lambda request: request), "object", accept={"callable"}),
        describer_for=P(lambda: (lambda request: None), "object", accept={"callable"})))
    for name in ("cleared", "begin_call", "end_call", "take", "peek"):
        cases.append(Case(f"events.EventLog.{name}[]", _log_world,
                          lambda w, name=name: getattr(w["log"], name)(), "accept"))  # type: ignore[misc]
    cases += [
        Case("events.EventLog.end_call[without begin_call]", _log_world, lambda w: w["idle"].end_call(), "reject"),
        Case("events.EventLog.end_call[a describer that fails]", _described_world(_failing_describer),
             lambda w: w["log"].end_call(), "reject"),
        Case("events.EventLog.end_call[a description of the wrong size]",
             _described_world(lambda group, ids: _context(token_ids=(1,))), lambda w: w["log"].end_call(), "reject"),
    ]
    cases += substitution_cases("events.StoreContext", empty_world, lambda w, **k: StoreContext(**k), dict(
        page_size=P(4, "count1", either={"2**31", "2**63", "10**100"}),
        parent_key=P(None, "key", accept={"None", "nan"}, either={"hashflip_str", "hashflip_int"}),
        token_ids=P((1, 2, 3, 4), "ids", accept={"list", "np_array", "ragged", "nested"}),
        extra_keys=P(None, "ids", accept={"None", "list", "np_array", "ragged", "nested"}),
        lora_id=P(None, "opt_count0", either={"2**31", "2**63", "10**100"}),
        lora_name=P(None, "object", accept={"None", "str", "empty_str"}),
        spec_kind=P(None, "object", accept={"None", "str", "empty_str"}),
        sliding_window=P(None, "opt_count1", either={"2**31", "2**63", "10**100"})))
    full = FULL_SPEC
    cases += substitution_cases("events.describe_run", _log_world, lambda w, **k: describe_run(**resolve(w, k)), dict(
        request=P(W("r"), "object"), spec=P(full, "object", accept=ALL),
        page_size=P(4, "count1", either={"2**31", "2**63", "10**100"}),
        first=P(0, "count0", either={"2**31", "2**63", "10**100"}),
        count=P(2, "count0", either={"2**31", "2**63", "10**100"}),
        parent_key=P(None, "key", accept={"None", "nan"}, either={"hashflip_str", "hashflip_int"}),
        extra_keys_of=P(None, "object", accept={"None"}, either={"callable"})))
    cases += substitution_cases("events.spec_metadata", empty_world, lambda w, **k: spec_metadata(**k),
                                {"spec": P(full, "object", accept=ALL)})  # anything else is "unknown"
    cases += substitution_cases("events.split_group", empty_world, lambda w, **k: split_group(**k),
                                {"key": P(b"k", "object", accept=ALL)})  # any key splits, unhashable ones too
    cases += substitution_cases("events.wire_hash", empty_world, lambda w, **k: wire_hash(**k),
                                {"key": P(b"k", "object", accept=ALL - UNHASHABLE)})
    return cases


def _failing_describer(group: int | None, ids: tuple[int, ...]) -> StoreContext:
    raise RuntimeError("the describer failed")


def _described_world(describer: Callable[[int | None, tuple[int, ...]], StoreContext]) -> Callable[[], World]:
    """`_log_world` whose open call holds one more store, described by ``describer``."""
    def build() -> World:
        world = _log_world()
        world["log"].set_store_context(describer)
        world["log"].stored(4, b"y" * 32)
        return world
    return build


CASES: list[Case] = wire_cases() + encoding_cases() + publisher_cases() + event_api_cases()
