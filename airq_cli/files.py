"""Result files every tool writes: atomically (a reader never sees half a file), with the mode open()
would give (others can read shared results), JSON encoded one way (numpy values and dataclasses as
plain JSON), and missing values shown one way."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airq_cli.contract import OutputError
from airq_cli.paths import file_mode

MISSING = "-"  # how a table cell shows a value that was not measured


def write_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write bytes via a temporary file in the same folder and a rename. The file gets the mode open()
    would give it (0666 minus the umask): mkstemp's 0600 would hide shared results from everyone else.
    A path that cannot be written raises OutputError (one line, exit 2; also an OSError)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from e
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), file_mode())
            f.write(data)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise OutputError(f"cannot write {path}: {e.strerror or e}") from e
        raise
    return path


def jsonable(value: Any) -> Any:
    """``json.dumps(default=...)``: numpy scalars and arrays, dataclasses and paths as plain JSON."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Path):
        return str(value)
    item, tolist = getattr(value, "item", None), getattr(value, "tolist", None)
    if callable(tolist) and getattr(value, "ndim", None):  # numpy array (a scalar has ndim 0)
        return tolist()
    if callable(item):  # numpy scalar
        return item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def json_text(value: Any, indent: int | None = 1) -> str:
    return json.dumps(value, indent=indent, default=jsonable)


def write_json(path: str | os.PathLike[str], value: Any, indent: int | None = 1) -> Path:
    """``value`` as JSON (see :func:`jsonable`), written atomically."""
    return write_atomic(path, json_text(value, indent).encode())


def shown(value: Any, spec: str = "", suffix: str = "") -> str:
    """A value formatted for a table or a line of text, ``MISSING`` when it was not measured (None or NaN)."""
    if value is None or (isinstance(value, float) and value != value):
        return MISSING
    return f"{value:{spec}}{suffix}"


def known_fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``data`` that are fields of the dataclass ``cls`` (for ``cls(**...)``): a result file
    from an earlier version may lack fields added since (they take their defaults) or carry fields since
    removed (ignored), so reading one back never depends on the exact version that wrote it."""
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    return {k: v for k, v in data.items() if k in names}
