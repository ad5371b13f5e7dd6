"""The HTML pages of the reports (hil.run's report.html, the deployment study's study.html, quarl's report.html).

Each page is one self-contained file, rendered by Jinja2 from the JSON its tool has already written and the
PNGs it has drawn: the figures are embedded as ``data:`` URIs, the style sits in the page, there is no script,
and a Content-Security-Policy lets the browser fetch nothing else, so a page mailed, archived or opened offline
shows everything it showed when it was written.

A number a page takes from its JSON says where it came from (the ``num`` macro of ``report_macros.html.j2``):
``data-key`` is its path in the JSON (``runs.0.outcomes.success_rate``), ``data-value`` the value as JSON and
``data-scale`` the factor its text shows it at (100 for a percentage, 2^-20 for bytes shown in MiB). The tests
read these back from the page in a browser and compare them with the file.

The shared parts live here and in ``nav_env/templates`` (the page's frame and style, the macros); each tool's
page is a module of its own (``hil.report_html``, ``deployment_study.report_html``, ``quarl.report_html``) with
its template in its package's ``templates`` folder.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airq_cli import shown as format_shown
from airq_cli import write_atomic

if TYPE_CHECKING:
    from jinja2 import Environment

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Figure:
    """A PNG as the page embeds it: its file name, its data URI and its size in pixels (the page gives
    every image its size, so nothing moves while the page lays out)."""

    name: str
    uri: str
    width: int
    height: int


def figure(path: Path) -> Figure:
    """A PNG file as a :class:`Figure`; ValueError for a file that is not a PNG."""
    data = Path(path).read_bytes()
    if not data.startswith(PNG_MAGIC):
        raise ValueError(f"{path} is not a PNG file")
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")  # the IHDR chunk
    return Figure(Path(path).name, "data:image/png;base64," + base64.b64encode(data).decode("ascii"), width, height)


def figures_by_name(paths: Iterable[Path]) -> dict[str, Figure]:
    """The PNGs among ``paths`` (a tool's list of written files), by file name; files gone since are left out."""
    return {Path(p).name: figure(Path(p)) for p in paths if Path(p).suffix == ".png" and Path(p).is_file()}


def read_report(source: Mapping[str, Any] | Path, out_dir: Path | None = None) -> tuple[dict[str, Any], Path]:
    """The report's data (a dict as it is, or the JSON file at a path) and the folder its page goes in: ``out_dir``,
    or the JSON file's (so a dict needs an ``out_dir``)."""
    if isinstance(source, Mapping):
        if out_dir is None:
            raise ValueError("a report page from a dict needs the folder to write it in (out_dir)")
        return dict(source), out_dir
    return json.loads(Path(source).read_text()), Path(out_dir or Path(source).parent)


def lookup(data: Any, key: str) -> Any:
    """The value at a dot-separated path (``runs.0.outcomes.success_rate``): list items by index."""
    value = data
    for part in key.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def shown(value: Any, spec: str = "", scale: float = 1, suffix: str = "") -> str:
    """A number as a page shows it: times ``scale``, as ``airq_cli.shown`` formats it (``MISSING`` when it was
    not measured). Non-numbers as they are."""
    if isinstance(value, bool) or (value is not None and not isinstance(value, int | float)):
        return f"{value}{suffix}"
    return format_shown(value * scale if value is not None and scale != 1 else value, spec, suffix)


def json_value(value: Any) -> str:
    """A value as JSON for a ``data-value`` attribute (autoescaping then quotes it for HTML)."""
    return json.dumps(value)


@cache
def environment(package: str) -> Environment:
    """The Jinja2 environment of one tool's pages: its own ``templates`` folder first, then the shared one.
    Autoescaped (every text from a report, a path or an error message, is shown as text), and an undefined
    name is an error rather than an empty cell."""
    # deferred: jinja2: HTML reports only
    from jinja2 import ChoiceLoader, Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=ChoiceLoader([PackageLoader(package, "templates"), PackageLoader("nav_env", "templates")]),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["shown"] = shown
    env.filters["json_value"] = json_value
    env.globals["lookup"] = lookup
    return env


def write_page(path: Path, package: str, template: str, data: Mapping[str, Any], **context: Any) -> Path:
    """``template`` of ``package`` rendered with the report's ``data`` (what the ``num`` macro reads by key),
    written atomically to ``path``."""
    page = environment(package).get_template(template).render(data=data, **context)
    return write_atomic(path, page.encode())
