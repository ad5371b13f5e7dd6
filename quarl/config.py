"""A study's configuration (TOML) and the trials it expands to.

    name = "classic"
    seeds = [0, 1, 2]
    eval_episodes = 100          # per policy, the same seeded episodes for every policy of a trial
    ptq_bits = [8, 7, 6, 5, 4, 3, 2]
    qat_bits = [8, 6, 5, 4, 3, 2]

    [[cell]]
    env = "CartPole-v1"
    algo = "ppo"
    steps = 100_000              # optional: the RL Zoo's budget otherwise (a smaller one is labelled)

Unknown keys, values of the wrong type or out of range, and a cell without RL Zoo hyperparameters (an unknown
env or algorithm, quarl.zoo) are errors naming the key or the cell (one line, exit 2), found at load time.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from quarl.errors import QuarlError

ALGOS = ("a2c", "dqn", "ppo", "ddpg", "td3", "sac")
# onnxruntime PTQ files; fp32 is always there. int8: static, 8-bit weights (the seed's int8); int8-w7: static, 7-bit
# weights (airq's shipped u8s7 scheme), both from the same calibration (quarl.export.STATIC_SCHEMES)
PTQ_TARGETS = ("fp16", "int8", "int8-w7", "int8-dynamic")
ROUNDINGS = ("nearest", "floor")
EVAL_SEED = 1_000_000  # episode seeds eval_seed + i: far from every training seed


@dataclass(frozen=True)
class TrialSpec:
    """One Ray Tune trial: a cell (env x algorithm) and a training seed, with the study's settings."""

    env_id: str
    algo: str
    seed: int
    steps: int | None = None  # None: the zoo's n_timesteps
    eval_episodes: int = 100
    eval_seed: int = EVAL_SEED
    ptq_targets: tuple[str, ...] = PTQ_TARGETS
    ptq_bits: tuple[int, ...] = (8, 7, 6, 5, 4, 3, 2)
    qat_bits: tuple[int, ...] = (8, 6, 5, 4, 3, 2)
    qat_steps_fraction: float = 0.25  # QAT fine-tunes for this fraction of the training budget...
    qat_delay_fraction: float = 0.3  # ...the first part of it in float, monitoring activation ranges
    rounding: str = "nearest"
    calibration_episodes: int = 10  # static int8 and n-bit activation ranges: the fp32 policy's own episodes
    threads: int = 1
    # False: a seed whose fp32 policy fails its baseline gate stops after the fp32 evaluation (its quantized
    # policies would not count in any conclusion, and an idle policy can play every episode to the step cap)
    quantize_failed_baselines: bool = True

    @property
    def name(self) -> str:
        return f"{env_slug(self.env_id)}_{self.algo}_s{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrialSpec:
        d = dict(d)
        for key in ("ptq_targets", "ptq_bits", "qat_bits"):
            if key in d:
                d[key] = tuple(d[key])
        return cls(**d)


@dataclass(frozen=True)
class Cell:
    env_id: str
    algo: str
    steps: int | None = None


@dataclass(frozen=True)
class StudyConfig:
    name: str
    cells: tuple[Cell, ...]
    seeds: tuple[int, ...] = (0, 1, 2)
    trial: TrialSpec = field(default_factory=lambda: TrialSpec("", "", 0))  # the shared settings

    def trials(self) -> list[TrialSpec]:
        return [
            replace(self.trial, env_id=c.env_id, algo=c.algo, seed=s, steps=c.steps)
            for c in self.cells
            for s in self.seeds
        ]


def env_slug(env_id: str) -> str:
    return env_id.replace("/", "-")


# The type each shared key's TOML value must have (a list's items for the tuples).
SHARED_TYPES: dict[str, tuple[str, type | tuple[type, ...]]] = {
    "eval_episodes": ("an integer", int),
    "eval_seed": ("an integer", int),
    "calibration_episodes": ("an integer", int),
    "threads": ("an integer", int),
    "quantize_failed_baselines": ("true or false", bool),
    "qat_steps_fraction": ("a number", (int, float)),
    "qat_delay_fraction": ("a number", (int, float)),
    "rounding": ("a string", str),
    "ptq_targets": ("a list of strings", str),
    "ptq_bits": ("a list of integers", int),
    "qat_bits": ("a list of integers", int),
}
SHARED_KEYS = set(SHARED_TYPES)  # the study-wide settings a config may give (TrialSpec's fields)


def _check_types(shared: dict[str, Any], where: str) -> None:
    """A value of the wrong type is a one-line error naming its key (never a TypeError from a comparison later)."""
    for key, value in shared.items():
        what, kind = SHARED_TYPES[key]
        is_list = what.startswith("a list")
        items = value if is_list and isinstance(value, list) else [value]
        if is_list != isinstance(value, list) or not all(
            isinstance(v, kind) and (kind is bool or not isinstance(v, bool)) for v in items
        ):
            raise QuarlError(f"{where}: {key!r} must be {what}, got {value!r}")


def _check_cell(cell: Cell, where: str) -> None:
    """The cell's env and algorithm must have RL Zoo hyperparameters (quarl.zoo): an unknown env fails here,
    at load time, not in a trial after Ray has started."""
    # deferred: torch, stable_baselines3 (via quarl.zoo): only once the rest of the config is known good
    from quarl.zoo import zoo_entry

    try:
        zoo_entry(cell.env_id, cell.algo)
    except QuarlError as e:
        raise QuarlError(f"{where}: {e}") from None


def _check_trial(t: TrialSpec, where: str) -> None:
    if t.algo not in ALGOS:
        raise QuarlError(f"{where}: algo must be one of {', '.join(ALGOS)}, got {t.algo!r}")
    if t.steps is not None and t.steps < 1:
        raise QuarlError(f"{where}: steps must be >= 1, got {t.steps}")
    if t.eval_episodes < 1:
        raise QuarlError(f"{where}: eval_episodes must be >= 1, got {t.eval_episodes}")
    bad = [b for b in (*t.ptq_bits, *t.qat_bits) if not (isinstance(b, int) and 2 <= b <= 16)]
    if bad:
        raise QuarlError(f"{where}: bit widths must be integers in 2..16, got {bad}")
    unknown = [p for p in t.ptq_targets if p not in PTQ_TARGETS]
    if unknown:
        raise QuarlError(f"{where}: ptq_targets must be among {', '.join(PTQ_TARGETS)}, got {unknown}")
    if not 0 < t.qat_steps_fraction <= 1 or not 0 <= t.qat_delay_fraction < 1:
        raise QuarlError(f"{where}: need 0 < qat_steps_fraction <= 1 and 0 <= qat_delay_fraction < 1")
    if t.rounding not in ROUNDINGS:
        raise QuarlError(f"{where}: rounding must be one of {', '.join(ROUNDINGS)}, got {t.rounding!r}")
    if t.calibration_episodes < 1 or t.threads < 1:
        raise QuarlError(f"{where}: calibration_episodes and threads must be >= 1")


def parse_config(data: dict[str, Any], where: str = "config") -> StudyConfig:
    known = {"name", "seeds", "cell"} | SHARED_KEYS
    unknown = sorted(set(data) - known)
    if unknown:
        raise QuarlError(f"{where}: unknown key(s) {unknown} (known: {sorted(known)})")
    name = data.get("name")
    if not isinstance(name, str) or not name or "/" in name:
        raise QuarlError(f"{where}: 'name' must be a non-empty string without '/', got {name!r}")
    seeds = data.get("seeds", [0, 1, 2])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds):
        raise QuarlError(f"{where}: 'seeds' must be a non-empty list of integers >= 0, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise QuarlError(f"{where}: 'seeds' has duplicates: {seeds}")
    shared = {k: data[k] for k in SHARED_KEYS if k in data}
    _check_types(shared, where)
    trial = TrialSpec.from_dict({"env_id": "", "algo": "ppo", "seed": 0, **shared})
    raw_cells = data.get("cell")
    if not isinstance(raw_cells, list) or not raw_cells:
        raise QuarlError(f"{where}: at least one [[cell]] with env and algo is needed")
    cells = []
    for i, c in enumerate(raw_cells):
        at = f"{where}: cell {i + 1}"
        if not isinstance(c, dict):
            raise QuarlError(f"{at}: a cell is a [[cell]] table with env and algo, got {c!r}")
        extra = sorted(set(c) - {"env", "algo", "steps"})
        if extra:
            raise QuarlError(f"{at}: unknown key(s) {extra} (known: env, algo, steps)")
        if not isinstance(c.get("env"), str) or not isinstance(c.get("algo"), str):
            raise QuarlError(f"{at}: 'env' and 'algo' must be strings")
        steps = c.get("steps")
        if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool)):
            raise QuarlError(f"{at}: 'steps' must be an integer, got {steps!r}")
        cell = Cell(c["env"], c["algo"].lower(), steps)
        _check_trial(replace(trial, env_id=cell.env_id, algo=cell.algo, steps=steps), at)
        cells.append(cell)
    if len({(c.env_id, c.algo) for c in cells}) != len(cells):
        raise QuarlError(f"{where}: a cell (env, algo) appears twice")
    for i, cell in enumerate(cells):
        _check_cell(cell, f"{where}: cell {i + 1}")
    return StudyConfig(name, tuple(cells), tuple(seeds), trial)


def load_config(path: str | Path) -> StudyConfig:
    path = Path(path)
    if not path.is_file():
        raise QuarlError(f"{path}: no such config file")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise QuarlError(f"{path}: not valid TOML: {e}") from None
    return parse_config(data, str(path))
