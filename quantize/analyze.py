"""``python -m quantize analyze MODEL``: per-layer weight histograms with the n-bit grid overlaid, and
per-layer quantization error (SQNR) for each bit width, like the seed's Figures 2 and 3.

MODEL is an fp32 policy ONNX file or a policies.train run directory. SQNR is reported for the paper's
formula (floor) and for the seed's code (round to nearest): the floor costs about 6 dB here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from airq_cli import check_output_dir, write_atomic, write_json
from nav_env.render import figure_png
from quantize.affine import affine_params, fake_quantize, sqnr_db
from quantize.errors import QuantizeError

ALL_BITS = list(range(2, 17))


def layer_weights(source: str | Path) -> tuple[str, list[tuple[str, np.ndarray]]]:
    """(name, [(layer name, weight matrix)]) in forward order."""
    path = Path(source)
    if path.is_dir():
        # deferred: torch: seconds to import
        from torch import nn

        # deferred: torch (via policies.actor): seconds to import
        from policies.actor import actor_from_model, load_run

        _, model, _ = load_run(path, "best")
        actor = actor_from_model(model)
        linears = [m for m in actor.body.modules() if isinstance(m, nn.Linear)] + [actor.head]
        names = [f"hidden{i}" for i in range(len(linears) - 1)] + ["head"]
        return path.name, [(n, m.weight.detach().numpy().astype(np.float32)) for n, m in zip(names, linears)]
    # deferred: onnx (via quantize.model_io): ~0.2 s to import, paid only where used
    from quantize.model_io import load_policy

    pm = load_policy(path)
    precision = pm.metadata.get("airq.precision", "fp32")
    if precision != "fp32":
        raise QuantizeError(f"{path}: analyze needs the fp32 model, this one is {precision}")
    layers = onnx_layer_weights(pm.model)
    if not layers:
        raise QuantizeError(f"{path}: no Gemm/MatMul weights found")
    return path.stem, layers


def onnx_layer_weights(model, op_types: tuple[str, ...] = ("Gemm", "MatMul")) -> list[tuple[str, np.ndarray]]:
    """[(layer name, weight tensor)] of the graph's ``op_types`` nodes whose weight (input 1) is an
    initializer, in graph order. Any ONNX model (no policy contract checked): ``op_types`` may add
    "Conv" for a CNN policy (its weights are [out, in, kh, kw])."""
    # deferred: onnx (via quantize.model_io): ~0.2 s to import, paid only where used
    from quantize.model_io import weight_initializers

    inits = weight_initializers(model)
    return [
        (node.name or f"{node.op_type}{i}", inits[node.input[1]].astype(np.float32))
        for i, node in enumerate(model.graph.node)
        if node.op_type in op_types and len(node.input) > 1 and node.input[1] in inits
    ]


def sqnr_table(layers: list[tuple[str, np.ndarray]], bits: list[int]) -> list[dict]:
    rows = []
    for name, w in layers:
        rows.append(
            {
                "layer": name,
                "shape": list(w.shape),
                "min": float(w.min()),
                "max": float(w.max()),
                "std": float(w.std()),
                "sqnr_floor_db": {b: round(sqnr_db(w, fake_quantize(w, b, "floor")), 2) for b in bits},
                "sqnr_nearest_db": {b: round(sqnr_db(w, fake_quantize(w, b, "nearest")), 2) for b in bits},
            }
        )
    return rows


def plot(layers: list[tuple[str, np.ndarray]], bits: list[int], rows: list[dict], title: str) -> tuple[bytes, bytes]:
    # deferred: matplotlib: plots only
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid_bits = min(bits)
    n = len(layers)
    fig, axes = plt.subplots(n, 1, figsize=(8, 2.3 * n), squeeze=False)
    for ax, (name, w), row in zip(axes[:, 0], layers, rows):
        ax.hist(w.ravel(), bins=200, color="tab:blue", alpha=0.8, log=True, histtype="stepfilled")  # one patch: fast
        p = affine_params(w, grid_bits)
        grid = (np.arange(2**grid_bits) - p.zero_point) * p.delta
        if len(grid) <= 64:
            for g in grid:
                ax.axvline(g, color="tab:red", lw=0.6, alpha=0.7)
        label = ", ".join(
            f"{b}b {row['sqnr_floor_db'][b]:.0f}/{row['sqnr_nearest_db'][b]:.0f} dB" for b in sorted(bits, reverse=True)
        )
        ax.set_title(f"{name} {tuple(w.shape)}: SQNR floor/nearest {label}", fontsize=8)
        ax.set_ylabel("count (log)", fontsize=7)
        ax.tick_params(labelsize=7)
    axes[-1, 0].set_xlabel(f"weight value (red: the {grid_bits}-bit grid of the seed's quantizer)")
    fig.suptitle(f"{title}: weight distributions", fontsize=10)
    fig.tight_layout()
    hist_png = figure_png(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for k, (name, w) in enumerate(layers):
        color = plt.cm.tab10(k % 10)
        ax.plot(
            ALL_BITS,
            [sqnr_db(w, fake_quantize(w, b, "nearest")) for b in ALL_BITS],
            "-o",
            ms=3,
            color=color,
            label=f"{name} nearest",
        )
        ax.plot(
            ALL_BITS,
            [sqnr_db(w, fake_quantize(w, b, "floor")) for b in ALL_BITS],
            "--",
            color=color,
            alpha=0.6,
            label=f"{name} floor",
        )
    ax.set_xlabel("bits")
    ax.set_ylabel("SQNR (dB)")
    ax.set_title(f"{title}: per-layer weight SQNR", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    sqnr_png = figure_png(fig)
    return hist_png, sqnr_png


def run_analyze(source: str, bits: list[int], out: str | None) -> Path:
    name, layers = layer_weights(source)
    bits = sorted(set(bits), reverse=True)
    rows = sqnr_table(layers, bits)
    out_dir = check_output_dir(out or f"out/analyze/{name}", "--out")
    hist_png, sqnr_png = plot(layers, bits, rows, name)
    write_atomic(out_dir / "weights.png", hist_png)
    write_atomic(out_dir / "sqnr.png", sqnr_png)
    write_json(out_dir / "sqnr.json", rows)
    head = f"{'layer':<18} {'shape':<12} {'min':>8} {'max':>8} " + " ".join(f"{f'{b}b fl/nr':>13}" for b in bits)
    print(f"{name}: per-layer weight SQNR in dB, seed's quantizer, floor (paper formula) / nearest (seed code)")
    print(head)
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        cells = " ".join(f"{r['sqnr_floor_db'][b]:>6.1f}/{r['sqnr_nearest_db'][b]:<6.1f}" for b in bits)
        print(f"{r['layer'][:18]:<18} {shape:<12} {r['min']:>8.3f} {r['max']:>8.3f} {cells}")
    print(f"plots: {out_dir / 'weights.png'}, {out_dir / 'sqnr.png'}")
    return out_dir
