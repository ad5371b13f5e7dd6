"""A small userspace TCP proxy that injects link faults, in the spirit of Toxiproxy.

This kernel has no ``tc netem``, so delay, jitter, stalls and cut connections are made here:

* latency: every chunk is held ``delay_s +- jitter_s`` (uniform) per direction. Chunks of one
  direction are released in order, as TCP would deliver them - jitter never reorders bytes;
* stall: nothing is forwarded for a while (a Wi-Fi freeze); held data arrives afterwards, and what the
  client sent on each connection while held is counted (``stalled_upstream_bytes``): a client that keeps
  sending into a frozen link has the bridge execute a burst of stale requests when it thaws;
* cut: every open connection is closed at once (an access point drops its clients).

Packet loss is not faked here: it is real, dropped by nftables inside the bridge's network
namespace, so TCP itself retransmits (see netns_link.py).

The proxy runs an asyncio loop in a daemon thread; the control methods are thread-safe.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from dataclasses import dataclass


@dataclass
class Toxics:
    delay_s: float = 0.0
    jitter_s: float = 0.0
    stall_until: float = 0.0  # time.monotonic(); forwarding paused before this


class FaultProxy:
    """``with FaultProxy(("10.231.7.2", 5555)) as proxy: connect to proxy.endpoint``"""

    def __init__(self, upstream: tuple[str, int], listen_host: str = "127.0.0.1", seed: int = 0) -> None:
        self.upstream = upstream
        self.listen_host = listen_host
        self.toxics = Toxics()
        self.port = 0
        self.connections_total = 0
        self.cuts = 0
        # Bytes a client sent on one connection while a stall held them, one entry per connection and stall.
        self.stalled_upstream_bytes: list[int] = []
        self.upstream_chunks = 0  # chunks read from clients, so a test can wait for traffic (wait_for_upstream)
        self._traffic = threading.Condition()
        self._random = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.listen_host}:{self.port}"

    # ------------------------------------------------------------------ control (any thread)

    def start(self) -> FaultProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, self.listen_host, 0), self._loop
        ).result(timeout=5)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def set_latency(self, delay_s: float, jitter_s: float = 0.0) -> None:
        self.toxics.delay_s, self.toxics.jitter_s = delay_s, jitter_s

    def stall(self, seconds: float) -> None:
        self.toxics.stall_until = time.monotonic() + seconds

    def wait_for_upstream(self, chunks: int, timeout_s: float) -> None:
        """Block until ``chunks`` more chunks have come from clients (requests flowing); fail after timeout_s."""
        with self._traffic:
            target = self.upstream_chunks + chunks
            if not self._traffic.wait_for(lambda: self.upstream_chunks >= target, timeout_s):
                raise AssertionError(f"fewer than {chunks} chunks from clients within {timeout_s} s")

    def cut_connections(self) -> int:
        """Close every open connection (both sides); return how many were open."""

        async def cut() -> int:
            writers = list(self._writers)
            for writer in writers:
                writer.transport.abort()  # RST-like: no graceful FIN handshake
            return len(writers) // 2

        self.cuts += 1
        return asyncio.run_coroutine_threadsafe(cut(), self._loop).result(timeout=5)

    def close(self) -> None:
        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the proxy (loop thread)

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.wait_for(asyncio.open_connection(*self.upstream), 5)
        except (TimeoutError, OSError):
            client_writer.transport.abort()
            return
        self.connections_total += 1
        self._writers |= {client_writer, upstream_writer}
        try:
            await asyncio.gather(
                self._pipe(client_reader, upstream_writer, upstream=True),
                self._pipe(upstream_reader, client_writer),
                return_exceptions=True,
            )
        finally:
            for writer in (client_writer, upstream_writer):
                self._writers.discard(writer)
                writer.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: bool = False) -> None:
        """Forward one direction; each chunk waits its own delay but never overtakes the previous one."""
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

        async def deliver() -> None:
            while (item := await queue.get()) is not None:
                due, chunk = item
                while (wait := max(due, self.toxics.stall_until) - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                writer.write(chunk)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        last_due = 0.0
        held = 0  # bytes read while the current stall holds them

        def count_held() -> None:
            nonlocal held
            if held:
                self.stalled_upstream_bytes.append(held)
                held = 0

        try:
            while chunk := await reader.read(65536):
                delay = self.toxics.delay_s + self._random.uniform(-self.toxics.jitter_s, self.toxics.jitter_s)
                last_due = max(time.monotonic() + max(delay, 0.0), last_due)  # in order, like TCP
                queue.put_nowait((last_due, chunk))
                if upstream:
                    if self.toxics.stall_until > time.monotonic():
                        held += len(chunk)
                    else:
                        count_held()
                    with self._traffic:
                        self.upstream_chunks += 1
                        self._traffic.notify_all()
        finally:
            if upstream:
                count_held()
            queue.put_nowait(None)
            try:
                await sender
            finally:
                writer.transport.abort()
