"""policies.bench runs (one measured rollout of Policy I) and reports a positive throughput."""

from __future__ import annotations

import json

from policies.errors import run_cli


def test_bench_smoke(tmp_path, capsys):
    from policies.bench import main

    out = tmp_path / "bench.json"
    assert run_cli(main, ["--presets", "policy1", "--rollouts", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())["results"][0]
    assert result["preset"] == "policy1" and result["env_steps_per_s"] > 0
    assert "policy1" in capsys.readouterr().out
