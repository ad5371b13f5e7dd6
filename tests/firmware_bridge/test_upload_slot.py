"""The chunked-upload staging slot: in order, idempotent resends, one slot, bounded, stale uploads dropped."""

import pytest

from firmware_bridge.protocol import ErrorCode, ProtocolError, sha256_hex
from firmware_bridge.upload import UploadSlot

MODEL = bytes(range(256)) * 40  # 10,240 bytes
SHA = sha256_hex(MODEL)


def chunks(size: int):
    return [(offset, MODEL[offset : offset + size]) for offset in range(0, len(MODEL), size)]


def test_chunks_in_order_assemble_the_model_and_resends_change_nothing():
    slot = UploadSlot(max_model_bytes=len(MODEL))
    parts = chunks(3000)
    received = []
    for index, (offset, chunk) in enumerate(parts):
        got, complete = slot.add(sha256=SHA, size=len(MODEL), offset=offset, chunk=chunk, now_ns=index)
        if index == 1:  # a Lazy Pirate resend of the previous chunk, then of this one
            assert slot.add(sha256=SHA, size=len(MODEL), offset=0, chunk=parts[0][1], now_ns=index) == (6000, None)
            assert slot.add(sha256=SHA, size=len(MODEL), offset=offset, chunk=chunk, now_ns=index) == (6000, None)
        received.append(got)
    assert received == [3000, 6000, 9000, len(MODEL)]
    assert complete == MODEL and slot.staged_bytes == 0


def test_a_gap_is_refused_and_the_model_size_is_bounded():
    slot = UploadSlot(max_model_bytes=len(MODEL))
    slot.add(sha256=SHA, size=len(MODEL), offset=0, chunk=MODEL[:100])
    with pytest.raises(ProtocolError, match="expected offset 100") as info:
        slot.add(sha256=SHA, size=len(MODEL), offset=200, chunk=MODEL[200:300])
    assert info.value.code == ErrorCode.BAD_MESSAGE
    with pytest.raises(ProtocolError, match="runs past size"):
        slot.add(sha256=SHA, size=len(MODEL), offset=100, chunk=MODEL[100:] + b"x")
    with pytest.raises(ProtocolError, match="--max-model-bytes") as info:
        UploadSlot(max_model_bytes=len(MODEL) - 1).add(sha256=SHA, size=len(MODEL), offset=0, chunk=b"x")
    assert info.value.code == ErrorCode.TOO_LARGE
    for bad_size, bad_offset in ((0, 0), (-1, 0), (1.5, 0), (True, 0), (10, -1), (10, "0"), (10, None)):
        with pytest.raises(ProtocolError) as info:
            slot.add(sha256=SHA, size=bad_size, offset=bad_offset, chunk=b"")
        assert info.value.code == ErrorCode.BAD_MESSAGE


def test_one_slot_a_new_upload_replaces_an_unfinished_one():
    slot = UploadSlot(max_model_bytes=1 << 20)
    slot.add(sha256=SHA, size=len(MODEL), offset=0, chunk=MODEL[:5000])
    other = b"other model" * 100
    slot.add(sha256=sha256_hex(other), size=len(other), offset=0, chunk=other[:10])
    assert slot.staged_bytes == 10
    with pytest.raises(ProtocolError, match="from offset 0"):
        slot.add(sha256=SHA, size=len(MODEL), offset=5000, chunk=MODEL[5000:])


def test_an_idle_upload_is_dropped():
    slot = UploadSlot(max_model_bytes=1 << 20, stale_after_s=1.0)
    slot.add(sha256=SHA, size=len(MODEL), offset=0, chunk=MODEL[:5000], now_ns=0)
    assert slot.add(sha256=SHA, size=len(MODEL), offset=5000, chunk=MODEL[5000:6000], now_ns=900_000_000)[0] == 6000
    with pytest.raises(ProtocolError, match="idled out"):
        slot.add(sha256=SHA, size=len(MODEL), offset=6000, chunk=MODEL[6000:], now_ns=2_000_000_000)
    assert slot.staged_bytes == 0
