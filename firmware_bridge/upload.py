"""Policy uploads in chunks, assembled in one bounded staging buffer.

A message is at most --max-message-bytes (small: acts are a few KiB), so a model larger than that
arrives as several `load_policy` requests carrying `size` (the whole model's bytes) and `offset`.
There is one staging slot for the whole device, whoever sends: memory for uploads is at most
--max-model-bytes however many peers try. Chunks are appended in order; a chunk already received is
acknowledged again without change, because a Lazy Pirate client may resend any request. A new
upload at offset 0 replaces an unfinished one; one left idle longer than STALE_AFTER_S is dropped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from firmware_bridge.protocol import ErrorCode, ProtocolError

STALE_AFTER_S = 30.0


@dataclass
class _Staging:
    sha256: str
    size: int
    data: bytearray = field(default_factory=bytearray)
    touched_ns: int = 0


class UploadSlot:
    def __init__(self, max_model_bytes: int, stale_after_s: float = STALE_AFTER_S) -> None:
        self.max_model_bytes = max_model_bytes
        self.stale_after_ns = int(stale_after_s * 1e9)
        self._staging: _Staging | None = None

    @property
    def staged_bytes(self) -> int:
        return len(self._staging.data) if self._staging else 0

    def add(
        self, *, sha256: str, size: object, offset: object, chunk: bytes, now_ns: int | None = None
    ) -> tuple[int, bytes | None]:
        """Take one chunk; returns (bytes received so far, the complete model once the last byte is in)."""
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        if type(size) is not int or size <= 0:
            raise ProtocolError(ErrorCode.BAD_MESSAGE, "field 'size' must be a positive int (the model's bytes)")
        if type(offset) is not int or offset < 0:
            raise ProtocolError(ErrorCode.BAD_MESSAGE, "field 'offset' must be a non-negative int")
        if size > self.max_model_bytes:
            raise ProtocolError(
                ErrorCode.TOO_LARGE, f"policy is {size} bytes, limit is {self.max_model_bytes} (--max-model-bytes)"
            )
        if offset + len(chunk) > size:
            raise ProtocolError(ErrorCode.BAD_MESSAGE, f"chunk at offset {offset} runs past size {size}")
        staging = self._staging
        if staging is not None and now_ns - staging.touched_ns > self.stale_after_ns:
            staging = self._staging = None
        if offset == 0 and (staging is None or (staging.sha256, staging.size) != (sha256, size)):
            staging = self._staging = _Staging(sha256, size)
        if staging is None or (staging.sha256, staging.size) != (sha256, size):
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE,
                f"no upload of {size} bytes with this sha256 in progress (another upload replaced it, or it "
                "idled out): send it again from offset 0",
            )
        received = len(staging.data)
        if offset > received:
            raise ProtocolError(ErrorCode.BAD_MESSAGE, f"chunk at offset {offset}, expected offset {received}")
        if offset + len(chunk) > received:
            if offset < received:  # partly a resend: only the new tail is appended
                chunk = chunk[received - offset :]
            staging.data += chunk
        staging.touched_ns = now_ns
        if len(staging.data) < size:
            return len(staging.data), None
        self._staging = None
        return size, bytes(staging.data)
