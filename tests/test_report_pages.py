"""The checks the report pages' browser tests rely on (tests/report_pages.py) and nav_env.report_page's helpers:
a checker that cannot fail would pass any page."""

from __future__ import annotations

import io
import math

import pytest
from report_pages import REQUIRE, blank, chromium, compare_marked, shown_number

from nav_env.report_page import figure, lookup, shown


def test_shown_numbers_are_read_as_a_reader_reads_them():
    assert shown_number("1,234.5") == (1234.5, 1)
    assert shown_number("+4.0") == (4.0, 1) and shown_number("-25.5") == (-25.5, 1)
    assert shown_number("50.0%") == (50.0, 1) and shown_number("1.25x") == (1.25, 2)
    assert shown_number("80 ms") == (80.0, 0) and shown_number("-") is None


def test_a_page_that_differs_from_its_json_is_caught():
    data = {"runs": [{"rate": 0.5, "bytes": 2**21, "p": None, "name": "a.onnx"}]}

    def mark(key, value, scale, text):
        return {"key": key, "value": value, "scale": scale, "text": text}

    good = [
        mark("runs.0.rate", "0.5", "100", "50.0%"),
        mark("runs.0.bytes", "2097152", str(1 / 2**20), "2.0"),
        mark("runs.0.p", "null", "1", "-"),
        mark("runs.0.name", None, None, "a.onnx"),
    ]
    assert compare_marked(good, data) == []
    bad = [
        mark("runs.0.rate", "0.4", "100", "40.0%"),  # the attribute is not the JSON's value
        mark("runs.0.rate", "0.5", "100", "51.0%"),  # the text is not the value as shown
        mark("runs.0.rate", "0.5", "100", "-"),  # a value shown as missing
        mark("runs.0.p", "null", "1", "0.0"),  # a missing value shown as a number
        mark("runs.0.name", None, None, "b.onnx"),
    ]
    assert len(compare_marked(bad, data)) == len(bad)


def test_blank_screenshots_are_told_from_drawn_ones():
    import numpy as np
    from PIL import Image

    def png(pixels) -> bytes:
        buf = io.BytesIO()
        Image.fromarray(np.asarray(pixels, dtype=np.uint8)).save(buf, format="PNG")
        return buf.getvalue()

    page = np.full((200, 300, 3), 244)
    assert blank(png(page))
    page[20:120, 30:250] = 40  # a block of text or a figure
    assert not blank(png(page))


def test_without_chromium_the_browser_tests_skip_unless_required(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.delenv(REQUIRE, raising=False)
    with pytest.raises(pytest.skip.Exception, match="Chromium is not installed"):
        chromium()
    monkeypatch.setenv(REQUIRE, "1")
    with pytest.raises(pytest.fail.Exception, match=f"{REQUIRE}=1 but Chromium is not installed"):
        chromium()


def test_report_page_helpers(tmp_path):
    data = {"runs": [{"outcomes": {"success_rate_by_zone": {"1": 0.25}}}]}
    assert lookup(data, "runs.0.outcomes.success_rate_by_zone.1") == 0.25
    assert shown(0.25, ".1f", 100) == "25.0" and shown(None) == "-" and shown(math.nan, ".2f") == "-"
    (tmp_path / "a.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match="is not a PNG"):
        figure(tmp_path / "a.png")
