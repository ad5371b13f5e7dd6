"""Training config: defaults < TOML < flags; the shipped configs/train/*.toml are valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.config import TrainConfig, build_parser, load_toml, resolve
from policies.presets import PRESETS

REPO = Path(__file__).resolve().parents[2]


def test_flags_override_toml_which_overrides_defaults(tmp_path):
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text('policy = "policy2"\nsteps = 1000\nlearning_rate = 1\n')
    args = build_parser("t").parse_args(["--config", str(cfg_file), "--steps", "5000"])
    cfg = resolve(args)
    assert cfg.policy == "policy2" and cfg.steps == 5000 and cfg.learning_rate == 1.0
    assert cfg.n_epochs == TrainConfig().n_epochs


def test_resolved_config_round_trips(tmp_path):
    cfg = TrainConfig(policy="policy3", steps=123, curriculum=False, out="runs/x")
    path = tmp_path / "config.toml"
    path.write_text(cfg.to_toml())
    assert TrainConfig(**load_toml(path)) == cfg


@pytest.mark.parametrize("path", sorted((REPO / "configs" / "train").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_configs_are_valid(path):
    cfg = TrainConfig(**load_toml(path)).validate()
    assert cfg.policy in PRESETS


def test_presets_match_the_paper():
    assert PRESETS["policy1"].actor == (64, 64, 64)
    assert PRESETS["policy2"].actor == (256, 256, 256)
    assert PRESETS["policy3"].actor == (4096, 512, 1024)
    assert all(p.activation == "relu" for p in PRESETS.values())
