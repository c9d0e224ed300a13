"""verikv.kv_events: vLLM 0.33's KV event wire format and the ZMQ publisher."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

msgspec = pytest.importorskip("msgspec")
zmq = pytest.importorskip("zmq")

from verikv.errors import InvalidArgumentError  # noqa: E402
from verikv.events import AllPagesCleared, KVEvent, PageRemoved, PageStored  # noqa: E402
from verikv.kv_events import (  # noqa: E402
    END_SEQ,
    BlockStored,
    ZmqEventPublisher,
    decode_batch,
    encode_batch,
    to_wire_event,
    untagged_extra_keys,
)

H1, H2 = bytes(range(32)), bytes(range(1, 33))
STORED = PageStored((H1, H2), b"\xff" * 32, tuple(range(8)), 4, 1, 7, "adapter",
                    ((("lora", "adapter"), ("salt", "t")), (("lora", "adapter"), ("mm", b"img", 2))),
                    page_ids=(3, 4), spec_kind="sliding_window", sliding_window=8)
EVENTS: list[KVEvent] = [STORED, PageRemoved((H1,), 1, page_ids=(3,)), AllPagesCleared()]


def test_a_batch_is_an_array_of_tagged_maps_with_vllms_field_names() -> None:
    raw = msgspec.msgpack.decode(encode_batch(EVENTS, ts=12.5, data_parallel_rank=2))
    assert raw == [12.5, [
        {"type": "BlockStored", "block_hashes": [H1, H2], "parent_block_hash": b"\xff" * 32,
         "token_ids": list(range(8)), "block_size": 4, "lora_id": 7, "medium": "GPU", "lora_name": "adapter",
         "extra_keys": [["adapter", "t"], ["adapter", [b"img", 2]]], "group_idx": 1,
         "kv_cache_spec_kind": "sliding_window", "kv_cache_spec_sliding_window": 8},
        {"type": "BlockRemoved", "block_hashes": [H1], "medium": "GPU", "group_idx": 1},
        {"type": "AllBlocksCleared"},
    ], 2]


def test_required_fields_are_always_present_and_optional_ones_only_when_set() -> None:
    bare = PageStored((H1,), None, (1, 2), 2)
    raw = msgspec.msgpack.decode(encode_batch([bare, PageRemoved((H1,))], ts=0.0))
    assert raw == [0.0, [{"type": "BlockStored", "block_hashes": [H1], "parent_block_hash": None, "token_ids": [1, 2],
                          "block_size": 2, "lora_id": None, "medium": "GPU", "lora_name": None},
                         {"type": "BlockRemoved", "block_hashes": [H1], "medium": "GPU"}], None]


def test_int_hashes_are_the_low_64_bits() -> None:
    raw = msgspec.msgpack.decode(encode_batch(EVENTS[:2], ts=0.0, int_hashes=True))
    low = int.from_bytes(H1[-8:], "big")
    assert raw[1][0]["block_hashes"] == [low, int.from_bytes(H2[-8:], "big")]
    assert raw[1][0]["parent_block_hash"] == (1 << 64) - 1 and raw[1][1]["block_hashes"] == [low]


def test_decode_round_trip_and_bad_payloads() -> None:
    batch = decode_batch(encode_batch(EVENTS, ts=1.0, data_parallel_rank=0))
    assert batch.ts == 1.0 and batch.data_parallel_rank == 0
    assert isinstance(batch.events[0], BlockStored)
    # msgpack has one array type: a tuple inside an extra key comes back as a list
    assert msgspec.msgpack.encode(batch.events[0]) == msgspec.msgpack.encode(to_wire_event(STORED))
    assert [type(e).__name__ for e in batch.events] == ["BlockStored", "BlockRemoved", "AllBlocksCleared"]
    for payload in (b"", b"\x01", msgspec.msgpack.encode([1.0, [{"type": "Nope"}], None])):
        with pytest.raises(InvalidArgumentError):
            decode_batch(payload)


def test_untagged_extra_keys() -> None:
    assert untagged_extra_keys(None) is None and untagged_extra_keys(()) is None
    assert untagged_extra_keys((("lora", "a"), ("mm", b"h", 3), ("salt", b"s"))) == ("a", (b"h", 3), b"s")
    assert untagged_extra_keys((("lora", "name", "/path"),)) == ("name",)  # vLLM publishes the name only
    assert untagged_extra_keys((5,)) == (5,) and untagged_extra_keys("x") == ("x",)


def test_what_cannot_be_published_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="page size"):
        encode_batch([PageStored((H1,))])  # from the bare pool: vLLM's block_size is required
    for kw in (dict(data_parallel_rank=-1), dict(int_hashes=1), dict(ts="now")):
        with pytest.raises(InvalidArgumentError):
            encode_batch(EVENTS, **kw)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        to_wire_event("BlockStored")  # type: ignore[arg-type]


@pytest.mark.parametrize("kw", [dict(endpoint=5), dict(topic=None), dict(replay_endpoint=1), dict(buffer_steps=0),
                                dict(hwm=-1), dict(data_parallel_rank=-1), dict(int_hashes=None), dict(bind="yes")])
def test_publisher_arguments_are_checked(kw: dict) -> None:
    with pytest.raises(InvalidArgumentError):
        ZmqEventPublisher(**{"endpoint": "tcp://127.0.0.1:*", **kw})


def _replay(endpoint: str, start: int) -> list[list[bytes]]:
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(endpoint)
    dealer.send_multipart((b"", start.to_bytes(8, "big")))
    frames: list[list[bytes]] = []
    try:
        while dealer.poll(60_000):  # a bound that only stops a hang
            frames.append(dealer.recv_multipart()[1:])
            if frames[-1][1] == END_SEQ:
                return frames
        raise AssertionError("no end of replay")
    finally:
        dealer.close(linger=0)
        ctx.term()


def test_publisher_frames_sequence_numbers_and_replay() -> None:
    with ZmqEventPublisher("tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*", topic="t", buffer_steps=3,
                           data_parallel_rank=1) as pub:
        assert pub.endpoint.startswith("tcp://127.0.0.1:") and not pub.endpoint.endswith("*")
        seqs = [pub.publish(EVENTS[i:i + 1], ts=float(i)) for i in range(3)] + [pub.publish([], ts=3.0)]
        assert seqs == [0, 1, 2, 3] and pub.next_seq == 4
        frames = _replay(pub.replay_endpoint or "", 2)
    assert [f[:2] for f in frames] == [[b"t", (2).to_bytes(8, "big")], [b"t", (3).to_bytes(8, "big")], [b"", END_SEQ]]
    assert decode_batch(frames[0][2]).events == [to_wire_event(AllPagesCleared())] and frames[2][2] == b""
    assert decode_batch(frames[1][2]).data_parallel_rank == 1
    with pytest.raises(InvalidArgumentError):
        pub.publish([])  # closed
    pub.close()  # idempotent


def test_publish_from_drains_a_manager_and_skips_an_empty_drain() -> None:
    class Manager:
        def __init__(self) -> None:
            self.pending = [EVENTS[1]]

        def take_events(self) -> list:
            events, self.pending = self.pending, []
            return events

    with ZmqEventPublisher("tcp://127.0.0.1:*") as pub:
        m = Manager()
        assert pub.publish_from(m) == 0 and pub.publish_from(m) is None and pub.next_seq == 1


#: a Python with vLLM 0.33: VERIKV_VLLM_PYTHON, else the anchors harness's venv (its setup script builds
#: it at $ANCHORS_VENV, docs/performance.md); the test is skipped without either
VLLM_PYTHON = os.environ.get("VERIKV_VLLM_PYTHON") or (
    str(Path(os.environ["ANCHORS_VENV"]) / "bin" / "python") if os.environ.get("ANCHORS_VENV") else "")


@pytest.mark.skipif(not VLLM_PYTHON or not Path(VLLM_PYTHON).exists(),
                    reason="needs a Python with vLLM 0.33 (VERIKV_VLLM_PYTHON)")
def test_bytes_equal_vllms_own_encoding() -> None:
    """vLLM 0.33's msgspec classes, given the same values, encode the same bytes."""
    script = (
        "import msgspec, sys\n"
        "from vllm.distributed.kv_events import KVEventBatch, BlockStored, BlockRemoved, AllBlocksCleared\n"
        "H1, H2 = bytes(range(32)), bytes(range(1, 33))\n"
        "b = KVEventBatch(ts=12.5, data_parallel_rank=2, events=[BlockStored(block_hashes=[H1, H2],"
        " parent_block_hash=b'\\xff' * 32, token_ids=list(range(8)), block_size=4, lora_id=7, medium='GPU',"
        " lora_name='adapter', extra_keys=[('adapter', 't'), ('adapter', (b'img', 2))], group_idx=1,"
        " kv_cache_spec_kind='sliding_window', kv_cache_spec_sliding_window=8),"
        " BlockRemoved(block_hashes=[H1], medium='GPU', group_idx=1), AllBlocksCleared()])\n"
        "sys.stdout.write(msgspec.msgpack.encode(b).hex())\n")
    done = subprocess.run([VLLM_PYTHON, "-c", script], capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and "No module named 'vllm'" in done.stderr:
        pytest.skip("VERIKV_VLLM_PYTHON has no vLLM")
    assert done.returncode == 0, done.stderr[-2000:]
    assert bytes.fromhex(done.stdout) == encode_batch(EVENTS, ts=12.5, data_parallel_rank=2)


# --- hostile inputs: typed errors, nothing changed, nothing left to hang on ---------------------

_REFUSED_THEN_COLLECTED = """
import gc, sys
from verikv.errors import InvalidArgumentError
from verikv.kv_events import ZmqEventPublisher

def refused(**kwargs):
    try:
        ZmqEventPublisher(**kwargs)
    except InvalidArgumentError:
        gc.collect()
    else:
        sys.exit(f"accepted {kwargs}")

for kwargs in (dict(endpoint="inproc://a", hwm=2**31), dict(endpoint="inproc://a", buffer_steps=2**63),
               dict(endpoint="bogus://x"), dict(endpoint=""), dict(endpoint="ipc:///nonexistent-verikv/s")):
    refused(**kwargs)
held = ZmqEventPublisher("tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*")
refused(endpoint=held.endpoint, bind=True)  # fails on the first socket
refused(endpoint="tcp://127.0.0.1:*", replay_endpoint=held.replay_endpoint)  # on the second
held.close()
dropped = ZmqEventPublisher("inproc://dropped")
dropped.cycle = dropped  # collected only by the cycle collector, never closed
dropped.publish([])
del dropped
gc.collect()
unclosed = ZmqEventPublisher("tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*")  # open at exit
print("done")
"""


def test_a_refused_or_dropped_publisher_leaves_nothing_to_hang_on() -> None:
    """A refused publisher releases what it opened, a collected or unclosed one is closed first:
    the collections and the interpreter's exit finish (the timeout only detects a hang)."""
    done = subprocess.run([sys.executable, "-c", _REFUSED_THEN_COLLECTED], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]


@pytest.mark.parametrize("kw", [dict(endpoint="inproc://a", hwm=2**31), dict(buffer_steps=2**63),
                                dict(endpoint="bogus://x"), dict(endpoint=""), dict(endpoint="tcp://"),
                                dict(endpoint="ipc:///nonexistent-verikv/s"), dict(data_parallel_rank=2**64),
                                dict(topic="\ud800"), dict(replay_endpoint="inproc://a\x00b")])
def test_bad_publisher_arguments_are_typed_errors(kw: dict) -> None:
    with pytest.raises(InvalidArgumentError):
        ZmqEventPublisher(**{"endpoint": "tcp://127.0.0.1:*", **kw})


def test_an_address_in_use_is_a_typed_error() -> None:
    with ZmqEventPublisher("tcp://127.0.0.1:*") as held, pytest.raises(InvalidArgumentError, match="in use"):
        ZmqEventPublisher(held.endpoint, bind=True)


def _payload_with(**fields: object) -> bytes:
    event = {"type": "BlockStored", "block_hashes": [H1], "parent_block_hash": None, "token_ids": [1],
             "block_size": 1, "lora_id": None, "medium": "GPU", "lora_name": None, **fields}
    return msgspec.msgpack.encode([1.0, [event], None])


def test_hostile_payloads_are_typed_errors() -> None:
    invalid_utf8 = _payload_with(lora_name="lora").replace(b"\xa4lora", b"\xa4\xff\xfe\xfd\xfc")
    deep = _payload_with(extra_keys=[["HERE"]]).replace(msgspec.msgpack.encode("HERE"), b"\x91" * 1000 + b"\x00")
    for payload in (invalid_utf8, deep, b"\x93\xcb" + bytes(8) + b"\xdd\xff\xff\xff\xff", b"\xc1"):
        with pytest.raises(InvalidArgumentError):
            decode_batch(payload)
    with pytest.raises(InvalidArgumentError, match="nested deeper"):
        decode_batch(deep)
    with pytest.raises(InvalidArgumentError):
        decode_batch("not bytes")  # type: ignore[arg-type]


def test_the_nesting_bound_is_exact_and_independent_of_the_recursion_limit() -> None:
    """MAX_WIRE_NESTING containers decode, one more is refused, before msgspec recurses: with a
    recursion limit raised far past the C stack, 10**6 levels are refused, not a crash."""
    from verikv.kv_events import MAX_WIRE_NESTING

    def nested(depth: int) -> bytes:  # the batch, events, event, extra keys and page entry: 5 levels
        return _payload_with(extra_keys=[["HERE"]]).replace(msgspec.msgpack.encode("HERE"),
                                                            b"\x91" * (depth - 5) + b"\x00")

    event = decode_batch(nested(MAX_WIRE_NESTING)).events[0]
    assert isinstance(event, BlockStored) and event.extra_keys is not None
    with pytest.raises(InvalidArgumentError):
        decode_batch(nested(MAX_WIRE_NESTING + 1))
    script = ("import sys\nsys.setrecursionlimit(10**7)\nfrom verikv.errors import InvalidArgumentError\n"
              "from verikv.kv_events import decode_batch\n"
              "payload = b'\\x93\\xcb' + bytes(8) + b'\\x91' * 10**6 + b'\\xc0'\n"
              "try:\n    decode_batch(payload)\nexcept InvalidArgumentError:\n    print('refused')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "refused", done.stderr[-2000:]


def test_encoding_refuses_what_the_wire_cannot_carry() -> None:
    for call in (lambda: encode_batch(5), lambda: encode_batch(EVENTS, data_parallel_rank=2**64),  # type: ignore[arg-type]
                 lambda: encode_batch(EVENTS, ts=float("nan")), lambda: encode_batch(EVENTS, ts=10**400),
                 lambda: encode_batch([PageStored((H1,), None, (1,), 1, extra_keys=((2**64,),))]),
                 lambda: untagged_extra_keys(object()), lambda: to_wire_event(STORED, int_hashes=1)):  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            call()
    assert decode_batch(encode_batch([], data_parallel_rank=2**63 - 1)).data_parallel_rank == 2**63 - 1


def test_a_refused_publish_sends_nothing_and_changes_nothing() -> None:
    from verikv import PagePool

    with ZmqEventPublisher("tcp://127.0.0.1:*") as pub:
        for call in (lambda: pub.publish(5), lambda: pub.publish(EVENTS, ts=float("inf")),  # type: ignore[arg-type]
                     lambda: pub.publish_from(None), lambda: pub.publish_from(object())):
            with pytest.raises(InvalidArgumentError):
                call()
        assert pub.next_seq == 0 and not pub._channel.buffer
        pool = PagePool(4, enable_kv_events=True)
        pool.cache_page_id(pool.get_new_page_ids(1)[0], "k")  # a bare pool's PageStored: no page size
        before = pool.event_log.peek() if pool.event_log else []
        with pytest.raises(InvalidArgumentError, match="page size"):
            pub.publish_from(pool)
        assert pool.take_events() == before and len(before) == 1 and pub.next_seq == 0
