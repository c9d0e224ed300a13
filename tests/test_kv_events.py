"""verikv.kv_events: vLLM 0.33's KV event wire format and the ZMQ publisher (issue 17)."""

from __future__ import annotations

import os
import subprocess
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


#: a Python with vLLM 0.33: VERIKV_VLLM_PYTHON, else the anchors venv (benchmarks/RESULTS.md builds it
#: at $ANCHORS_VENV, /work/anchors-venv there); the test is skipped without one
VLLM_PYTHON = os.environ.get("VERIKV_VLLM_PYTHON") or str(
    Path(os.environ.get("ANCHORS_VENV", "/work/anchors-venv")) / "bin" / "python")


@pytest.mark.skipif(not Path(VLLM_PYTHON).exists(), reason="needs a Python with vLLM 0.33 (VERIKV_VLLM_PYTHON)")
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
