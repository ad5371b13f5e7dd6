"""Progress of a long job, shown the way the reader sees it: a tqdm bar when stderr is a terminal; otherwise
(a pipe, a log file, CI) one plain line per tenth of the work, so ``make demo | cat`` stays readable.

    from airq_cli import Progress, progress

    for result in progress(run_episodes(...), total=1000, desc="heuristic", unit="ep"):
        ...

    with Progress(total=100, desc="policy1_int8.onnx", unit="ep") as bar:
        for ...:
            bar.update(1, postfix=f"{hz:,.0f} Hz, success {rate:.0%}")
            bar.write("a message that does not tear the bar")   # stdout unless file= says otherwise

Plain lines go to stderr and read ``policy1_int8.onnx: 30/100 ep (30%), 12 s, 1,234 Hz, success 80%``; one
comes each time the count passes a multiple of ``every`` (default: a tenth of ``total``) and one at the end.
tqdm is imported only for a terminal, and a missing tqdm gives the plain lines.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO, TypeVar

T = TypeVar("T")


class Progress:
    """A count of ``unit``s towards ``total`` (None: unknown) under the name ``desc``.

    ``every``: units between plain lines (default ``ceil(total / 10)``; 1 when the total is unknown).
    ``initial``: units already done (a resumed run). ``quiet``: show nothing (write() still prints).
    ``file``: where the bar or the lines go (default: sys.stderr at construction). ``terminal``: force the
    bar (True) or the lines (False) instead of asking ``file.isatty()``. Other keywords go to tqdm
    (``leave``, ``unit_scale``, ``dynamic_ncols``, ``mininterval``...) and are ignored for plain lines.
    """

    def __init__(
        self,
        total: int | None,
        desc: str = "",
        *,
        unit: str = "ep",
        every: int | None = None,
        initial: int = 0,
        quiet: bool = False,
        file: TextIO | None = None,
        terminal: bool | None = None,
        **tqdm_options: Any,
    ) -> None:
        self.total, self.desc, self.unit, self.quiet = total, desc, unit, quiet
        self.file = file if file is not None else sys.stderr
        self.n = self._shown = initial
        self.every = max(1, int(every) if every else math.ceil(total / 10) if total else 1)
        self._next = (initial // self.every + 1) * self.every
        self._postfix = ""
        self._t0 = time.perf_counter()
        self._bar: Any = None
        if terminal is None:
            isatty = getattr(self.file, "isatty", None)
            terminal = bool(isatty and isatty())
        self.terminal = terminal
        if quiet or not terminal:
            return
        try:
            # deferred: tqdm: optional, terminals only
            from tqdm import tqdm
        except ImportError:  # nav_env runs without tqdm: plain lines then
            self.terminal = False
            return
        options = {"leave": False, "unit": unit} | tqdm_options
        self._bar = tqdm(total=total, desc=desc, initial=initial, file=self.file, **options)

    # ---------------------------------------------------------------- the count
    def update(self, n: int = 1, postfix: str | None = None) -> None:
        """``n`` more units done; ``postfix`` (e.g. ``"1,234 Hz, success 80%"``) replaces the last one."""
        self.n += n
        if postfix is not None:
            self._postfix = postfix
        if self.quiet:
            return
        if self._bar is not None:
            if postfix is not None:
                self._bar.set_postfix_str(postfix, refresh=False)
            self._bar.update(n)
        elif self.n >= self._next or (self.total is not None and self.n >= self.total > self._shown):
            self._next = (self.n // self.every + 1) * self.every
            self._line()

    def set_postfix(self, postfix: str) -> None:
        """Text after the count (the bar's postfix; the next plain line's tail)."""
        self._postfix = postfix
        if self._bar is not None and not self.quiet:
            self._bar.set_postfix_str(postfix)

    def write(self, text: str, file: TextIO | None = None) -> None:
        """A line of its own (default stdout) that does not tear the bar."""
        file = file if file is not None else sys.stdout
        if self._bar is not None:
            self._bar.write(text, file=file)
        else:
            print(text, file=file, flush=True)

    def close(self) -> None:
        """End the bar; without one, a last line if the count moved since the previous line."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif not self.quiet and not self.terminal and self.n != self._shown:
            self._line()
        self.quiet = True  # closed: nothing more is shown

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- plain lines
    def line(self) -> str:
        """The plain line for the count so far."""
        if self.total:
            count = f"{self.n:,}/{self.total:,} {self.unit} ({self.n / self.total:.0%})"
        else:
            count = f"{self.n:,} {self.unit}"
        text = f"{count}, {_duration(time.perf_counter() - self._t0)}"
        if self._postfix:
            text += f", {self._postfix}"
        return f"{self.desc}: {text}" if self.desc else text

    def _line(self) -> None:
        self._shown = self.n
        print(self.line(), file=self.file, flush=True)


def progress(
    iterable: Iterable[T],
    total: int | None = None,
    desc: str = "",
    *,
    unit: str = "ep",
    every: int | None = None,
    quiet: bool = False,
    file: TextIO | None = None,
    **tqdm_options: Any,
) -> Iterator[T]:
    """Yield from ``iterable``, counting one unit per item with a :class:`Progress` (``total`` defaults to
    ``len(iterable)`` when it has one). The bar closes when the iteration ends or stops."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with Progress(total, desc, unit=unit, every=every, quiet=quiet, file=file, **tqdm_options) as bar:
        for item in iterable:
            yield item
            bar.update(1)


def _duration(s: float) -> str:
    if s < 60:
        return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"
