"""The report pages (report.html, study.html) in a real headless Chromium, driven over the DevTools protocol.

Chromium is Debian's (``apt-get install chromium``; .ci/run installs it as root). It is driven through
``--remote-debugging-pipe`` (the DevTools protocol as NUL-terminated JSON on file descriptors 3 and 4), so no
WebDriver and no Python package beyond the standard library is needed. Without Chromium the tests skip with the
reason, unless AIRQ_REQUIRE_CHROMIUM=1 (.ci/run sets it where it installs Chromium) makes that a failure.

:func:`check_page` loads a page and checks what a reader would: no console error, nothing fetched but the file
itself and its data: URIs, a screenshot that is not blank, and every number marked with ``data-key`` (the
``num`` macro of nav_env/templates/report_macros.html.j2) equal to the JSON's value at that key, in its
attribute and in the text shown.
"""

from __future__ import annotations

import base64
import fcntl
import io
import json
import math
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REQUIRE = "AIRQ_REQUIRE_CHROMIUM"
# Without the background-networking flags Chromium tries to reach Google's services at start and, on a machine
# without a network, stalls and logs errors; a fresh --user-data-dir per page keeps runs independent.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)
WIDTH = 1280  # CSS pixels: a laptop's window
# Where the screenshots are kept for a person to look at (AIRQ_SCREENSHOT_DIR); by default in screenshots/ beside
# the page, apart from the figures the page embeds.
SHOTS = "AIRQ_SCREENSHOT_DIR"


def chromium() -> str:
    """Chromium's path; skips the test without it (fails instead under AIRQ_REQUIRE_CHROMIUM=1)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        reason = "Chromium is not installed (apt-get install chromium)"
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{REQUIRE}=1 but {reason}")
        pytest.skip(reason)
    return path


@dataclass
class Loaded:
    """What a page did in the browser."""

    errors: list[str] = field(default_factory=list)  # console errors, uncaught exceptions, failed loads
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    marked: list[dict[str, str]] = field(default_factory=list)  # the data-key elements: key, value, scale, text
    found: dict[str, Any] = field(default_factory=dict)  # the page's answer to the caller's expression
    screenshot: bytes = b""  # PNG of the whole page


def _pipe_to_3_and_4(commands: int, replies: int):
    """In the child before exec: Chromium reads DevTools commands from fd 3 and writes replies to fd 4. Both ends
    are first copied above 9, so that neither is overwritten by moving the other."""

    def move() -> None:
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (commands, replies)]
        for target, fd in zip((3, 4), high):
            os.dup2(fd, target)  # the copy is inheritable, unlike the pipe ends

    return move


class DevTools:
    """One Chromium process and its DevTools pipe."""

    def __init__(self, binary: str, profile: Path) -> None:
        self._to_browser_r, self._to_browser = os.pipe()
        self._from_browser, self._from_browser_w = os.pipe()
        # Python's own descriptors are not inheritable (PEP 446): without close_fds only 3 and 4 reach Chromium.
        self.process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            preexec_fn=_pipe_to_3_and_4(self._to_browser_r, self._from_browser_w),
            close_fds=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(self._to_browser_r)
        os.close(self._from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, params: dict | None = None, session: str | None = None, timeout_s: float = 30) -> Any:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        reply = self.wait(lambda m: m.get("id") == self._next_id, timeout_s)
        if "error" in reply:
            raise RuntimeError(f"DevTools {method}: {reply['error']}")
        return reply.get("result", {})

    def wait(self, matches, timeout_s: float = 30) -> dict[str, Any]:
        """The first message that ``matches``, among the events already kept (one may come before the reply to
        the command that caused it) or the messages to come; every other message is kept in ``events``."""
        earlier = next((m for m in self.events if matches(m)), None)
        if earlier is not None:
            return earlier
        end = time.monotonic() + timeout_s
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if matches(message):
                    return message
                self.events.append(message)
            ready, _, _ = select.select([self._from_browser], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                raise TimeoutError(f"Chromium did not answer within {timeout_s} s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                stderr = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise RuntimeError(f"Chromium closed its DevTools pipe: {stderr[-2000:]}")
            self._buffer += chunk

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout_s=10)
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stderr:
            self.process.stderr.close()
        os.close(self._to_browser)
        os.close(self._from_browser)


MARKED = "[...document.querySelectorAll('[data-key]')].map(e => ({key: e.dataset.key, value: e.dataset.value ?? null, scale: e.dataset.scale ?? null, text: e.textContent}))"


def load(page: Path, expression: str = "null", timeout_s: float = 60) -> Loaded:
    """Open ``page`` (a file) in headless Chromium at WIDTH CSS pixels; gather what it logged and asked
    for, its marked numbers, the value of ``expression`` (JavaScript, JSON-serialisable) and a screenshot."""
    binary = chromium()
    with tempfile.TemporaryDirectory(prefix="airq-chromium-") as profile:
        browser = DevTools(binary, Path(profile))
        try:
            target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Runtime", "Log", "Page", "Network"):
                browser.call(f"{domain}.enable", session=session)
            browser.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": WIDTH, "height": 900, "deviceScaleFactor": 1, "mobile": False},
                session=session,
            )
            browser.call("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
            browser.wait(lambda m: m.get("method") == "Page.loadEventFired", timeout_s)
            result: dict[str, Any] = {}
            for name, js in (("marked", MARKED), ("found", expression)):
                reply = browser.call(
                    "Runtime.evaluate",
                    {"expression": js, "returnByValue": True, "awaitPromise": True},
                    session=session,
                )
                if "exceptionDetails" in reply:
                    raise RuntimeError(f"{js}: {reply['exceptionDetails']}")
                result[name] = reply["result"].get("value")
            size = browser.call("Page.getLayoutMetrics", session=session)["cssContentSize"]
            shot = browser.call(
                "Page.captureScreenshot",
                {
                    "format": "png",
                    "captureBeyondViewport": True,
                    "clip": {"x": 0, "y": 0, "width": WIDTH, "height": math.ceil(size["height"]), "scale": 1},
                },
                session=session,
                timeout_s=timeout_s,
            )
        finally:
            browser.close()
    loaded = Loaded(marked=result["marked"], found=result["found"], screenshot=base64.b64decode(shot["data"]))
    for event in browser.events:
        method, params = event.get("method"), event.get("params") or {}
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            loaded.errors.append(
                "console: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            )
        elif method == "Runtime.exceptionThrown":
            loaded.errors.append("exception: " + json.dumps(params.get("exceptionDetails"))[:500])
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            loaded.errors.append(f"log ({params['entry'].get('source')}): {params['entry'].get('text')}")
        elif method == "Network.requestWillBeSent":
            loaded.requests.append(params["request"]["url"])
    return loaded


def shown_number(text: str) -> tuple[float, int] | None:
    """The number a cell shows ("1,234.5", "+4.0", "50.0%", "1.25x") and its decimals; None for a missing one."""
    found = re.search(r"[-+]?[\d,]*\d(?:\.(\d+))?", text)
    if text.strip() == "-" or found is None:
        return None
    return float(found.group(0).replace(",", "")), len(found.group(1) or "")


def compare_marked(marked: list[dict[str, str]], data: dict[str, Any]) -> list[str]:
    """Every marked number against the JSON: its data-value equal to the value at its key, and its text that
    value times its scale, rounded as shown. The differences, one line each."""
    from nav_env.report_page import lookup

    wrong = []
    for m in marked:
        if m["value"] is None:  # marked text, not a number (e.g. the command)
            if m["text"].strip() != str(lookup(data, m["key"])).strip():
                wrong.append(f"{m['key']}: shows {m['text']!r}, the JSON has {lookup(data, m['key'])!r}")
            continue
        expected = lookup(data, m["key"])
        value = json.loads(m["value"])
        same = value == expected or (isinstance(value, float) and math.isnan(value) and math.isnan(expected))
        if not same:
            wrong.append(f"{m['key']}: data-value {value!r}, the JSON has {expected!r}")
            continue
        number = shown_number(m["text"])
        missing = expected is None or (isinstance(expected, float) and math.isnan(expected))
        if number is None or missing:
            if number is not None or not missing:
                wrong.append(f"{m['key']}: shows {m['text']!r} for {expected!r}")
            continue
        shown, decimals = number
        if abs(shown - expected * float(m["scale"])) > 0.5 * 10**-decimals * (1 + 1e-9) + 1e-12:
            wrong.append(f"{m['key']}: shows {m['text']!r}, the JSON has {expected!r} (x {m['scale']})")
    return wrong


def blank(png: bytes) -> bool:
    """Whether a screenshot is (nearly) one colour: a page that drew nothing."""
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        pixels = np.asarray(im.convert("L"), dtype=np.int16)
    background = np.bincount(pixels.ravel()).argmax()
    return pixels.std() < 5.0 or (np.abs(pixels - background) > 16).mean() < 0.01


def check_page(page: Path, data: dict[str, Any], required: list[str], expression: str = "null") -> Loaded:
    """Load ``page`` and assert: no console error, nothing fetched but the page itself and data: URIs, no
    http(s) reference in its source, a screenshot that is not blank, every ``required`` key marked, and every
    marked number equal to ``data``'s. The screenshot is kept (AIRQ_SCREENSHOT_DIR, or screenshots/ beside the page)."""
    source = page.read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", source), "the page references the network"
    assert not re.search(r"url\(\s*['\"]?(?:https?:)?//", source), "the page's style references the network"
    loaded = load(page, expression)
    shots = Path(os.environ.get(SHOTS) or page.parent / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    (shots / f"{page.parent.name}-{page.stem}.png").write_bytes(loaded.screenshot)
    assert loaded.errors == [], loaded.errors
    fetched = [u for u in loaded.requests if not u.startswith("data:") and u != page.resolve().as_uri()]
    assert fetched == [], f"the page fetched {fetched}"
    assert not blank(loaded.screenshot), "the screenshot is blank"
    keys = {m["key"] for m in loaded.marked}
    missing = [k for k in required if k not in keys]
    assert not missing, f"not shown on the page: {missing}"
    wrong = compare_marked(loaded.marked, data)
    assert not wrong, "the page differs from its JSON:\n" + "\n".join(wrong)
    return loaded
