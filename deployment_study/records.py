"""Reading the study's typed records back from their JSON (study.json, timing/*.json, machine.json, memfit.json).

The records are dataclasses written by ``airq_cli.write_json`` (``dataclasses.asdict``); a file from an
earlier session may lack fields added since (they take their defaults) or carry fields since removed
(ignored), so reading never depends on the exact version that wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any


def known_fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``data`` that are fields of the dataclass ``cls`` (for ``cls(**...)``)."""
    names = {f.name for f in fields(cls) if f.init}
    return {k: v for k, v in data.items() if k in names}
