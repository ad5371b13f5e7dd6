"""A two-node Ray cluster on this machine, as docs/actorq.md sets one up across machines: `ray start --head`, a
worker node joining it with a custom resource, and `actorq.train --address ... --actor-resource ...` placing
every actor on the worker node. It all runs in a network namespace with only loopback (Ray binds every
interface it finds) and a pid namespace, so the test's Ray processes end with it and no other Ray on the
machine is touched (`ray stop` would stop them all). Needs root and unshare; without them the test skips with
the reason, unless AIRQ_REQUIRE_NETNS=1 (CI) makes that a failure."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")


def _reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network and pid namespaces)"
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    if not RAY.is_file():
        return f"{RAY} not found (the [distributed] extra)"
    return None


REASON = _reason()
if REASON and os.environ.get("AIRQ_REQUIRE_NETNS") == "1":
    raise RuntimeError(f"AIRQ_REQUIRE_NETNS=1 but the Ray cluster test cannot run: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"Ray cluster test: {REASON}")

SCRIPT = """
set -eu
ip link set lo up
export RAY_AUTH_MODE=token RAY_DISABLE_USAGE_STATS=1 RAY_worker_niceness=0 PYTHONPATH="$REPO"
# head: the driver's node, 2 CPUs for the learner; worker: 3 CPUs and the resource the actors ask for
"$RAY" start --head --node-ip-address=127.0.0.1 --port=6390 --num-cpus=2 --include-dashboard=false \
  --temp-dir="$RAYTMP" > "$TMP/head.log" 2>&1
"$RAY" start --address=127.0.0.1:6390 --node-ip-address=127.0.0.1 --num-cpus=3 \
  --resources='{"actorq_worker": 2}' > "$TMP/worker.log" 2>&1
"$PYTHON" -m actorq.train --address 127.0.0.1:6390 --actor-resource actorq_worker --task pendulum --actors 2 \
  --precision int8 --steps 1200 --rollout-steps 200 --learning-starts 400 --eval-episodes 2 --no-progress \
  --out "$TMP/run"
"""


def test_actors_run_on_the_worker_node_of_a_two_node_cluster(tmp_path):
    # Ray's unix sockets live under its temp dir, and their paths may not exceed 107 bytes: a short one
    ray_tmp = tempfile.mkdtemp(prefix="aqc", dir="/tmp")
    env = os.environ | {
        "REPO": str(REPO), "RAY": str(RAY), "PYTHON": sys.executable, "TMP": str(tmp_path), "RAYTMP": ray_tmp
    }  # fmt: skip
    try:
        done = subprocess.run(
            ["unshare", "--net", "--pid", "--fork", "--mount-proc", "bash", "-c", SCRIPT],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    logs = "".join(f"\n--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(tmp_path.glob("*.log")))
    assert done.returncode == 0, done.stderr[-3000:] + logs
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    ray = report["ray"]
    assert ray["address"] == "127.0.0.1:6390" and ray["nodes"] == 2 and ray["cpus"] == 5
    placement = ray["placement"]
    actors = set(placement["actors"]) | set(placement["actors_now"])
    assert len(actors) == 1 and placement["driver"] not in actors, placement
    assert report["state"]["env_steps"] == 1200 and report["state"]["updates"] > 0
    assert [v["version"] for v in report["versions"]] == list(range(len(report["versions"])))
