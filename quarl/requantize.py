"""``python -m quarl requantize STUDY``: rebuild a study's static int8 files from what each trial kept (its
``fp32.onnx`` and ``calibration_obs.npy``) and evaluate them on the trial's own seeded episodes. Nothing is
trained: a study run before a quantization scheme existed gets it in minutes, and the same command on the same
study gives the same files and returns (quantization and evaluation are deterministic).

Each trial's new policies replace its earlier ones of the same name in ``stages/onnx.json`` and ``trial.json``
(atomically), so ``python -m quarl report STUDY`` shows them next. Trials whose baseline failed and were never
quantized (no calibration observations) are listed and left as they are; so are unfinished ones.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from quarl.config import PTQ_TARGETS, TrialSpec
from quarl.errors import QuarlError
from quarl.pipeline import Trial
from quarl.results import PolicyEval

TARGETS = ("int8", "int8-w7")  # the static int8 files: 8-bit and 7-bit weights (quarl.export.STATIC_SCHEMES)


@dataclass(frozen=True)
class Requantized:
    trial: str
    status: str  # "done", "not quantized ...", "unfinished" or "failed: <one line>"
    seconds: float = 0.0
    policies: list[PolicyEval] = field(default_factory=list)

    def line(self) -> str:
        if self.status != "done":
            return f"{self.trial}: {self.status}"
        means = ", ".join(f"{p.name} {p.mean:.4g}" for p in self.policies)
        return f"{self.trial}: {means} ({self.seconds:.0f} s)"


def study_trials(study_dir: Path) -> list[tuple[TrialSpec, Path, str]]:
    """(spec, trial dir, status) of every trial in ``study_dir/study.json``."""
    path = study_dir / "study.json"
    try:
        record = json.loads(path.read_text())
        rows = record["trials"]
        return [(TrialSpec.from_dict(r["spec"]), study_dir / "trials" / r["name"], r["status"]) for r in rows]
    except FileNotFoundError:
        raise QuarlError(f"{study_dir}: no study.json (not a `quarl run` output directory)") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise QuarlError(f"{path}: not a study record ({e})") from None


def requantize_trial(spec: TrialSpec, trial_dir: Path, targets: tuple[str, ...]) -> Requantized:
    t0 = time.perf_counter()
    fresh = Trial(spec, trial_dir, progress=False).requantize(targets)
    if fresh is None:
        return Requantized(spec.name, "not quantized (baseline failed: no calibration observations)")
    return Requantized(spec.name, "done", time.perf_counter() - t0, fresh)


def requantize_study(
    study_dir: str | Path, targets: tuple[str, ...] = TARGETS, workers: int = 2, progress: bool = True
) -> list[Requantized]:
    """Every finished trial of the study, ``workers`` at a time (one onnxruntime thread each)."""
    study_dir = Path(study_dir)
    unknown = [t for t in targets if t not in PTQ_TARGETS]
    if unknown or not targets:
        raise QuarlError(f"--targets must be among {', '.join(PTQ_TARGETS)}, got {' '.join(targets) or 'none'}")
    trials = study_trials(study_dir)
    results = [Requantized(spec.name, "unfinished") for spec, _, status in trials if status != "done"]
    todo = [(spec, d) for spec, d, status in trials if status == "done"]
    with ProcessPoolExecutor(max_workers=max(1, min(workers, len(todo) or 1))) as pool:
        futures = [pool.submit(requantize_trial, spec, d, targets) for spec, d in todo]
        for number, future in enumerate(futures, 1):
            try:
                result = future.result()
            except Exception as e:  # one trial's failure is reported; the others go on
                result = Requantized(
                    todo[number - 1][0].name, f"failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
                )
            results.append(result)
            if progress:
                print(f"[{number}/{len(todo)}] {result.line()}", flush=True)
    return results
