"""Which of our policy groups stands beside which row of the seed's Table 4: a preset's own group, or the same preset
trained for the quadrotor (models/policyN_quadrotor_*.onnx); the page's table lists ours first, then the seed's rows
no group of ours stands beside."""

from __future__ import annotations

from deployment_study.report_html import table4
from deployment_study.seed import TABLE4, label, seed_group


def test_a_quadrotor_group_stands_beside_its_presets_seed_row():
    assert [seed_group(g) for g in ("policy1", "policy2_quadrotor", "policy3_quadrotor", "toy", "policy4")] == [
        "policy1", "policy2", "policy3", None, None,
    ]  # fmt: skip
    assert seed_group("policy1_quadrotor_hard") is None  # a level's own model is not the seed's
    assert [label(g) for g in ("policy3", "policy3_quadrotor", "toy")] == ["Policy III", "Policy III, quadrotor", "toy"]


def test_the_pages_table_lists_our_groups_then_the_seed_rows_left():
    rows = [
        {"group": "policy1_quadrotor", "level": "default", "precision": p, "model": f"policy1_quadrotor_{p}.onnx"}
        for p in ("fp32", "int8")
    ]
    data = {
        "args": {"levels": ["default"]},
        "rows": rows,
        "seed": {"table": {k: {} for k in TABLE4.table}},
        "roofline": [],
    }
    table = table4(data)
    assert [(t["group"], t["seed"], t["fp32"], t["int8"]) for t in table] == [
        ("policy1_quadrotor", "policy1", 0, 1),
        ("policy2", "policy2", None, None),
        ("policy3", "policy3", None, None),
    ]
