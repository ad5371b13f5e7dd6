"""A ZeroMQ peer written by hand over a raw TCP socket (ZMTP 3.0, NULL mechanism).

It can do what no libzmq socket would: announce a frame and send only part of it, then hold the
connection, the way an attacker pins memory on the device.
"""

from __future__ import annotations

import socket
import struct

GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31


def _command(name: bytes, body: bytes) -> bytes:
    payload = bytes([len(name)]) + name + body
    if len(payload) < 256:
        return bytes([0x04, len(payload)]) + payload
    return bytes([0x06]) + struct.pack(">Q", len(payload)) + payload


def _ready(socket_type: bytes = b"DEALER") -> bytes:
    prop = b"Socket-Type"
    return _command(b"READY", bytes([len(prop)]) + prop + struct.pack(">I", len(socket_type)) + socket_type)


class RawZmtpPeer:
    """connect(); then partial_frame(size, sent) declares a `size`-byte frame and sends `sent` bytes of it."""

    def __init__(self, host: str, port: int, timeout_s: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.sendall(GREETING)
        greeting = self._read_exact(64)
        if greeting[:1] != b"\xff" or greeting[10:11] != b"\x03":
            raise ConnectionError(f"not a ZMTP 3 greeting: {greeting[:12]!r}")
        self.sock.sendall(_ready())
        self._read_command()  # the bridge's READY

    def _read_exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("peer closed during handshake")
            data += chunk
        return data

    def _read_command(self) -> bytes:
        flags = self._read_exact(1)[0]
        size = struct.unpack(">Q", self._read_exact(8))[0] if flags & 0x02 else self._read_exact(1)[0]
        return self._read_exact(size)

    def send_frame_start(self, declared: int, more: bool = False) -> None:
        self.sock.sendall(bytes([0x02 | (0x01 if more else 0)]) + struct.pack(">Q", declared))

    def partial_frame(self, declared: int, sent: int, block: int = 1 << 20) -> int:
        """Declare a frame of `declared` bytes and send `sent` of them; returns bytes actually sent
        (the device may stop reading or drop the connection first)."""
        try:
            self.send_frame_start(declared)
        except OSError:
            return 0  # the device already closed the connection
        done = 0
        filler = b"\xa5" * block
        try:
            while done < sent:
                n = min(block, sent - done)
                self.sock.sendall(filler[:n])
                done += n
        except (TimeoutError, OSError):
            pass
        return done

    def alive(self) -> bool:
        """False once the device has closed the connection."""
        self.sock.setblocking(False)
        try:
            return self.sock.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            self.sock.setblocking(True)

    def close(self) -> None:
        self.sock.close()
