"""A known AirSim map's static obstacles, so episodes can be drawn clear of them.

The env cannot see an Unreal map's geometry. When it is known (measured, or the map was built from
a nav_env episode), describe it in arena coordinates as vertical cylinders ``(x, y, radius)`` and
axis-aligned boxes ``(x0, y0, x1, y1)``, e.g. in a JSON file::

    {"cylinders": [[12.0, 8.5, 0.8]], "boxes": [[20.0, 3.0, 22.5, 6.0]]}

and pass it as ``AirSimNavEnv(scene=...)``: seeded resets then draw start, yaw, goal and zone as the
embedded simulator does (``sample_episode``), keeping only draws whose start and goal are
``obstacles.clearance`` from every obstacle and joined by a collision-free path
(``nav_env.arena.solvable``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from airq_cli import write_atomic
from nav_env.arena import FAR, MAX_ATTEMPTS, Episode, GenerationError, sample_episode, slot_counts, solvable
from nav_env.config import NavConfig


@dataclass(frozen=True)
class Scene:
    cylinders: tuple[tuple[float, float, float], ...] = ()
    boxes: tuple[tuple[float, float, float, float], ...] = ()

    def __post_init__(self) -> None:
        cyl = tuple(tuple(float(v) for v in c) for c in self.cylinders)
        box = tuple(tuple(float(v) for v in b) for b in self.boxes)
        for c in cyl:
            if len(c) != 3 or not all(map(math.isfinite, c)) or c[2] <= 0:
                raise ValueError(f"a scene cylinder is (x, y, radius > 0), got {c!r}")
        for b in box:
            if len(b) != 4 or not all(map(math.isfinite, b)) or b[2] <= b[0] or b[3] <= b[1]:
                raise ValueError(f"a scene box is (x0, y0, x1, y1) with x1 > x0 and y1 > y0, got {b!r}")
        object.__setattr__(self, "cylinders", cyl)
        object.__setattr__(self, "boxes", box)

    @classmethod
    def load(cls, src: Scene | dict[str, Any] | str | os.PathLike) -> Scene:
        """From a Scene, a dict with ``cylinders`` / ``boxes``, or a JSON file holding one."""
        if isinstance(src, Scene):
            return src
        if isinstance(src, (str, os.PathLike)):
            try:
                src = json.loads(Path(src).read_text())
            except (OSError, json.JSONDecodeError) as e:
                raise ValueError(f"cannot read scene {str(src)!r}: {e}") from None
        if not isinstance(src, dict) or set(src) - {"cylinders", "boxes"}:
            raise ValueError("a scene is a mapping with 'cylinders' and/or 'boxes' (and nothing else)")
        return cls(tuple(src.get("cylinders", ())), tuple(src.get("boxes", ())))

    @classmethod
    def from_episode(cls, ep: Episode) -> Scene:
        """The static obstacles of an episode (moving ones are not part of a map)."""
        cyl = [tuple(c[:3]) for c in ep.cyl if c[0] < FAR and c[3] == 0 and c[4] == 0]
        box = [tuple(b) for b in ep.box if b[0] < FAR]
        return cls(tuple(cyl), tuple(box))

    def to_dict(self) -> dict[str, list]:
        return {"cylinders": [list(c) for c in self.cylinders], "boxes": [list(b) for b in self.boxes]}

    def save(self, path: str | os.PathLike) -> Path:
        return write_atomic(path, (json.dumps(self.to_dict()) + "\n").encode())

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(cylinders (Kc, 5) with zero velocity, boxes (Kb, 4)), as in an :class:`Episode`."""
        cyl = np.zeros((len(self.cylinders), 5))
        if self.cylinders:
            cyl[:, :3] = self.cylinders
        box = np.array(self.boxes, float).reshape(-1, 4)
        return cyl, box

    def clearance(self, p: np.ndarray) -> float:
        """Distance from the point ``p`` (x, y, ...) to the nearest obstacle surface."""
        d = math.inf
        for x, y, r in self.cylinders:
            d = min(d, math.hypot(p[0] - x, p[1] - y) - r)
        for x0, y0, x1, y1 in self.boxes:
            d = min(d, math.hypot(max(x0 - p[0], 0.0, p[0] - x1), max(y0 - p[1], 0.0, p[1] - y1)))
        return d

    def episode_fn(self) -> Callable[[np.random.Generator, NavConfig, int | None], Episode]:
        """``episode_fn(rng, cfg, zone)`` for :class:`AirSimNavEnv`: the embedded draw, kept only when
        start and goal are clear of this scene and joined by a path."""
        cyl, box = self.arrays()

        def draw(rng: np.random.Generator, cfg: NavConfig, zone: int | None) -> Episode:
            for _ in range(MAX_ATTEMPTS):
                ep = dataclasses.replace(sample_episode(rng, cfg, zone), cyl=cyl.copy(), box=box.copy())
                c = cfg.obstacles.clearance
                if self.clearance(ep.start) >= c and self.clearance(ep.goal) >= c and solvable(ep, cfg):
                    return ep
            raise GenerationError(f"no start and goal clear of the scene in {MAX_ATTEMPTS} draws (zone {zone})")

        return draw


def sized_config(cfg: NavConfig, ep: Episode) -> NavConfig:
    """``cfg`` with obstacle slot counts matching ``ep``'s arrays, so a ``BatchSim`` can load it
    (the level's own when they already match)."""
    kc, kb = len(ep.cyl), len(ep.box)
    if slot_counts(cfg) == (kc, kb):
        return cfg
    moving = bool(kc) and bool(np.any(ep.cyl[:, 3:5] != 0))
    o = dataclasses.replace(cfg.obstacles, cylinders=(0, kc - int(moving)), moving=(0, int(moving)), boxes=(0, kb))
    return dataclasses.replace(cfg, obstacles=o)
