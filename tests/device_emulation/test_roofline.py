"""device_emulation.roofline's model costs and predictions, and the profiles' cited figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airq_cli import json_text
from device_emulation import roofline
from device_emulation.profiles import FIGURES, ProfileError, load_profiles

MODELS = Path(__file__).resolve().parents[2] / "models"


def test_costs_of_the_shipped_policy1():
    fp32 = roofline.model_cost(MODELS / "policy1_fp32.onnx")
    int8 = roofline.model_cost(MODELS / "policy1_int8.onnx")
    macs = 1032 * 64 + 64 * 64 + 64 * 64 + 64 * 25  # 3 x 64 hidden layers and 25 logits
    assert fp32.macs == macs and fp32.ops == 2 * macs and fp32.precision == "fp32"
    assert int8.precision == "int8" and int8.macs >= macs  # the split first layer keeps every weight
    assert fp32.weight_bytes >= 4 * macs and int8.weight_bytes < fp32.weight_bytes / 3
    # the runtime's fixed cost is per operator: Gemm/Relu x 3, Gemm, ArgMax; the int8 adds (de)quantizers
    assert (fp32.operators, fp32.quantized_operators) == (8, 0)
    assert int8.operators > fp32.operators and int8.quantized_operators == 4  # QGemm: 2 for the split first layer
    assert roofline.model_cost((MODELS / "policy1_fp32.onnx").read_bytes()) == fp32  # the file's bytes alike


def test_a_file_that_is_not_onnx_is_a_value_error(tmp_path):
    bad = tmp_path / "x.onnx"
    bad.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(ValueError, match="not an ONNX model"):
        roofline.model_cost(bad)


def test_prediction_is_the_larger_bound():
    cost = roofline.ModelCost(weight_bytes=8_000_000, macs=2_000_000, precision="fp32")
    p = roofline.predict_s(cost, bandwidth_gbs=2.0, throughput_gops=8.0)
    assert p.memory_bound_s == pytest.approx(4e-3) and p.compute_bound_s == pytest.approx(0.5e-3)
    assert p.predicted_s == pytest.approx(4e-3) and p.bound_by == "memory"
    p = roofline.predict_s(cost, bandwidth_gbs=100.0, throughput_gops=1.0)
    assert p.predicted_s == pytest.approx(4e-3) and p.bound_by == "compute"


def test_pi3b_prediction_uses_dram_only_beyond_its_cache():
    pi3b = load_profiles()["pi3b"]
    big = roofline.ModelCost(weight_bytes=28_000_000, macs=7_000_000, precision="int8")
    small = roofline.ModelCost(weight_bytes=400_000, macs=400_000, precision="int8")
    half = roofline.ModelCost(weight_bytes=400_000, macs=400_000, precision="fp16")
    fixed = pi3b.fixed_us / 1e6
    p = roofline.predict_device(big, pi3b)
    assert not p.fits_in_cache and p.weights_from == "DRAM"
    assert p.predicted_s == pytest.approx(fixed + 28e6 / (pi3b.memory_bandwidth_gbs * 1e9))
    p = roofline.predict_device(small, pi3b)
    assert p.fits_in_cache and p.memory_bound_s is None and p.weights_from == "cache"
    assert p.predicted_s == pytest.approx(fixed + 0.8e6 / (pi3b.int8_gops * 1e9))
    assert roofline.predict_device(half, pi3b).missing == ("fp16 compute throughput",)


def test_check_here_agrees_only_within_2x():
    machine = roofline.MachineFigures(
        bandwidth_gbs={"1000000": 10.0}, throughput_gops={"fp32": 100.0}, private_cache_bytes=2_000_000
    )
    cost = roofline.ModelCost(weight_bytes=1_000_000, macs=1000, precision="fp32")  # predicted 100 us, in cache
    assert roofline.check_here(cost, machine, 190e-6).agrees
    assert not roofline.check_here(cost, machine, 210e-6).agrees
    assert not roofline.check_here(cost, machine, 40e-6).agrees
    # machine.json as written, read back (a resumed study)
    again = roofline.MachineFigures.from_dict(json.loads(json_text(machine)) | {"from_a_later_version": 1})
    assert again == machine


def test_weights_beyond_the_private_cache_stream_from_dram_and_fixed_costs_add_up():
    """The timing pass's cache state: the core keeps what fits in its own cache between two acts; anything
    larger comes from DRAM, even when a bare read loop finds it in the shared last-level cache."""
    machine = roofline.MachineFigures(
        bandwidth_gbs={"500000": 60.0, "8000000": 60.0},
        throughput_gops={"int8": 1000.0},
        dram_bandwidth_gbs=16.0,
        private_cache_bytes=512 * 1024,
        operator_us=0.5,
        quantized_operator_us=2.5,
    )
    small = roofline.ModelCost(weight_bytes=500_000, macs=10, precision="int8", operators=10, quantized_operators=4)
    big = roofline.ModelCost(weight_bytes=8_000_000, macs=10, precision="int8", operators=10, quantized_operators=4)
    call_s = 30e-6
    fixed = call_s + (6 * 0.5 + 4 * 2.5) / 1e6
    p = roofline.predict_here(small, machine, call_s)
    assert p.weights_from == "cache" and p.fixed_s == pytest.approx(fixed)
    assert p.predicted_s == pytest.approx(fixed + 500_000 / 60e9)
    p = roofline.predict_here(big, machine, call_s)
    assert p.weights_from == "DRAM" and p.predicted_s == pytest.approx(fixed + 8_000_000 / 16e9)
    # an old machine.json without a private cache: everything from DRAM (the conservative reading)
    old = roofline.MachineFigures(bandwidth_gbs={"500000": 60.0}, throughput_gops={}, dram_bandwidth_gbs=16.0)
    assert roofline.predict_here(small, old, 0.0).weights_from == "DRAM"


def test_weights_that_fit_the_shared_cache_are_judged_in_the_nearer_cache_state():
    """Between the private and the shared cache's sizes the timing pass may find the weights in the shared cache
    or not (the host's neighbours decide): the check judges the nearer prediction and keeps the other."""
    machine = roofline.MachineFigures(
        bandwidth_gbs={"8000000": 64.0, "64000000": 64.0},
        throughput_gops={"int8": 1000.0},
        dram_bandwidth_gbs=16.0,
        private_cache_bytes=512 * 1024,
        shared_cache_bytes=32 * 2**20,
    )
    big = roofline.ModelCost(weight_bytes=8_000_000, macs=10, precision="int8")
    dram_s, shared_s = 8_000_000 / 16e9, 8_000_000 / 64e9  # 500 us, 125 us
    c = roofline.check_here(big, machine, 140e-6)  # warm: the shared cache kept them
    assert (
        c.weights_from == "shared cache" and c.agrees and c.measured_over_predicted == pytest.approx(140e-6 / shared_s)
    )
    assert c.other_weights_from == "DRAM" and c.other_predicted_s == pytest.approx(dram_s)
    c = roofline.check_here(big, machine, 450e-6)  # cold: evicted between acts
    assert c.weights_from == "DRAM" and c.agrees and c.other_weights_from == "shared cache"
    assert not roofline.check_here(big, machine, 50e-6).agrees  # faster than either state: 0.4x the nearer
    assert not roofline.check_here(big, machine, 1.2e-3).agrees  # 2.4x the DRAM prediction
    # beyond the shared cache: DRAM only, nothing else to consider
    huge = roofline.ModelCost(weight_bytes=64_000_000, macs=10, precision="int8")
    c = roofline.check_here(huge, machine, 2e-3)
    assert (
        c.weights_from == "DRAM" and c.other_predicted_s is None and not roofline.check_here(huge, machine, 1e-3).agrees
    )
    # within the private cache: the cache only
    assert roofline.check_here(roofline.ModelCost(400_000, 10, "int8"), machine, 10e-6).other_weights_from == ""


def test_this_machines_fixed_costs_and_private_cache_are_measured():
    floats, quantized = roofline.operator_cost_us(False), roofline.operator_cost_us(True)
    assert 0 < floats < 50 and 0 < quantized < 200  # microseconds per operator, on any CPU
    cache, shared = roofline.private_cache_bytes(), roofline.shared_cache_bytes()
    assert cache == 0 or 16 * 1024 <= cache <= 64 * 2**20  # sysfs may not say (0); else a real L1/L2 size
    assert shared == 0 or cache < shared  # a shared last-level cache is larger than the core's own


def _fake_sysfs(root, siblings: str, caches: list[tuple[str, str, str]]):
    """cpu0 with its hardware threads and (type, size, shared_cpu_list) per cache level."""
    (root / "cpu0" / "topology").mkdir(parents=True)
    (root / "cpu0" / "topology" / "thread_siblings_list").write_text(siblings + "\n")
    for i, (kind, size, shared) in enumerate(caches):
        d = root / "cpu0" / "cache" / f"index{i}"
        d.mkdir(parents=True)
        (d / "type").write_text(kind + "\n")
        (d / "size").write_text(size + "\n")
        (d / "shared_cpu_list").write_text(shared + "\n")
    return root


@pytest.mark.parametrize(
    ("siblings", "caches", "private", "shared"),
    [
        # one thread per core (this project's AMD EPYC VMs): the L2 is the core's, the L3 is shared
        (
            "0",
            [("Data", "32K", "0"), ("Instruction", "32K", "0"), ("Unified", "512K", "0"), ("Unified", "32768K", "0-1")],
            512 * 1024,
            32 * 2**20,
        ),
        # two vCPUs that are one core's SMT threads: an L2 shared by them only is still the core's own
        (
            "0-1",
            [("Data", "48K", "0-1"), ("Unified", "2048K", "0-1"), ("Unified", "105M", "0-3")],
            2 * 2**20,
            105 * 2**20,
        ),
        # siblings listed with a comma (threads 0 and 4 of one core), an L3 shared with other cores
        ("0,4", [("Data", "32K", "0,4"), ("Unified", "1M", "0,4"), ("Unified", "16M", "0-7")], 2**20, 16 * 2**20),
        # every cache shared with another core: nothing is the core's own
        ("0", [("Unified", "8M", "0-1")], 0, 8 * 2**20),
    ],
)
def test_the_private_cache_is_the_largest_no_other_core_shares(tmp_path, siblings, caches, private, shared):
    sysfs = _fake_sysfs(tmp_path, siblings, caches)
    assert roofline.private_cache_bytes(0, sysfs) == private and roofline.shared_cache_bytes(0, sysfs) == shared


def test_without_sysfs_the_private_cache_is_unknown(tmp_path):
    assert (
        roofline.private_cache_bytes(0, tmp_path) == roofline.shared_cache_bytes(0, tmp_path) == 0
    )  # then every model's weights come from DRAM


def test_every_pi_figure_has_a_source():
    for name, p in load_profiles().items():
        for figure, source in FIGURES:
            if getattr(p, figure):
                assert "https://" in getattr(p, source), (name, figure)


def test_a_figure_without_its_source_is_refused(tmp_path):
    bad = tmp_path / "profiles.toml"
    bad.write_text('[board]\ndescription = "x"\nmemory_bandwidth_gbs = 2.0\n')
    with pytest.raises(ProfileError, match="memory_bandwidth_gbs needs its memory_bandwidth_source"):
        load_profiles(bad)
    bad.write_text('[board]\ndescription = "x"\ncompute_gflops = -1\ncompute_source = "https://x"\n')
    with pytest.raises(ProfileError, match="compute_gflops must be positive"):
        load_profiles(bad)
