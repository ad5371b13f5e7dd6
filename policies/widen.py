"""Derive a policy for a larger depth image from a trained one (no training): compose its first layer
with a fixed area-resampling operator.

    python -m policies.widen models/policy3_fp32.onnx --camera 144x256 -o out/memfit/policy3_airlearning_fp32.onnx
    python -m policies.widen models/policy3_fp32.onnx --camera 144x256 -o OUT.onnx --check-episodes 50 --report R.json
    python -m policies.widen models/policy3_fp32.onnx --check OUT_int8.onnx --check-episodes 50   # check any large model

A policy trained on the 32 x 32 depth image has a first layer ``h = W_d d + W_s s + b`` (depth
columns ``W_d``, 4096 x 1024 for Policy III; 8 state columns ``W_s``). ``R`` (1024 x H*W) maps an
H x W image to the 32 x 32 one by area averaging (each small pixel = the overlap-weighted mean of the
large pixels it covers; 8 x 4.5 of them at 144 x 256). ``W' = W_d R`` (4096 x 36,864 at 144 x 256)
with the state columns and everything after unchanged is a policy on the large observation that acts
exactly as the source would on the area-downsampled image: a functioning policy whose weight memory
is that of an Air Learning-sized Policy III (604 MB fp32), which is what the memory experiment
(deployment_study.memfit) needs. It sees no more than the source does.

The large camera keeps the default camera's 90 x 90 degree view (``nav_env.config.camera_overrides``),
so the area average matches the 32 x 32 render up to edge pixels. The output's metadata says what it
is (``airq.widen.*``: method, camera, source file and sha256) and carries the large env config, so
``python -m quantize ptq`` calibrates it on large-observation rollouts.

``--check-episodes N`` flies N seeded ``default`` episodes with the large model at the large camera;
at every state the source acts on the same state's 32 x 32 observation, giving action agreement, and
the success rate of both (the source over the same seeds at 32 x 32) is reported.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402

from airq_cli import ArgumentParser, output_file, run, write_atomic, write_json  # noqa: E402
from nav_env.config import (  # noqa: E402
    N_STATE_FEATURES,
    ConfigError,
    camera_overrides,
    load_level,
    observation_overrides_from_metadata,
    parse_camera,
)
from nav_env.rollout import episode_outcome, run_episodes, summarize  # noqa: E402
from nav_env.stats import wilson_interval  # noqa: E402
from nav_env.vector import NavVectorEnv  # noqa: E402
from policies.errors import UserError  # noqa: E402

WIDEN_PREFIX = "airq.widen."
ONNX_MAX_BYTES = 2**31 - 1  # protobuf's 2 GB limit for one serialized ONNX model
MAX_IR_VERSION = 10  # onnxruntime <= 1.31 refuses newer IR versions (the locked 1.32.0 takes them)


def area_matrix(n_out: int, n_in: int) -> np.ndarray:
    """(n_out, n_in) float64: output cell i averages the input cells it overlaps, by overlap length."""
    if n_out < 1 or n_in < n_out:
        raise UserError(
            f"cannot area-resample {n_in} cells to {n_out} (the large camera must be at least the source's size)"
        )
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        lo, hi = i * n_in / n_out, (i + 1) * n_in / n_out
        for j in range(int(np.floor(lo)), min(n_in, int(np.ceil(hi)))):
            m[i, j] = max(0.0, min(hi, j + 1) - max(lo, j))
    return m / m.sum(axis=1, keepdims=True)


def resample_operator(src_hw: tuple[int, int], dst_hw: tuple[int, int]) -> np.ndarray:
    """R (src_h*src_w, dst_h*dst_w): row-major small image = R @ row-major large image."""
    return np.kron(area_matrix(src_hw[0], dst_hw[0]), area_matrix(src_hw[1], dst_hw[1]))


def widen_depth_weights(
    w_depth: np.ndarray, src_hw: tuple[int, int], dst_hw: tuple[int, int], chunk: int = 256
) -> np.ndarray:
    """W_d (out, sh*sw) -> W_d R (out, dh*dw) float32, computed separably (rows, then columns) in
    output-row chunks so no (sh*sw) x (dh*dw) matrix is ever built."""
    rows, cols = area_matrix(src_hw[0], dst_hw[0]), area_matrix(src_hw[1], dst_hw[1])
    n_out = w_depth.shape[0]
    out = np.empty((n_out, dst_hw[0] * dst_hw[1]), dtype=np.float32)
    for a in range(0, n_out, chunk):
        w = w_depth[a : a + chunk].astype(np.float64).reshape(-1, src_hw[0], src_hw[1])
        # (W R)[o, r*dw + c] = sum_ij W[o, i*sw + j] rows[i, r] cols[j, c]
        big = np.einsum("oij,ir,jc->orc", w, rows, cols, optimize=True)
        out[a : a + chunk] = big.reshape(len(w), -1)
    return out


def _first_gemm(model):
    # deferred: onnx: ~0.2 s to import, paid only where used
    from onnx import helper

    users = [n for n in model.graph.node if "obs" in n.input]
    if len(users) != 1 or users[0].op_type != "Gemm" or users[0].input[0] != "obs":
        raise UserError("cannot widen: 'obs' does not feed exactly one Gemm (expected an airq MLP policy)")
    node = users[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0:
        raise UserError("cannot widen: first Gemm has transA or alpha != 1")
    return node, int(attrs.get("transB", 0))


def _source_camera(meta: dict[str, str], obs_dim: int) -> tuple[int, int]:
    try:
        cam = json.loads(meta.get("airq.env_config") or "{}").get("camera") or {}
    except ValueError:
        cam = {}
    h, w = int(cam.get("height", 32)), int(cam.get("width", 32))
    if h * w + N_STATE_FEATURES != obs_dim:
        raise UserError(f"source input size {obs_dim} is not a {h}x{w} depth image + {N_STATE_FEATURES} state values")
    return h, w


def widen_model(source: str | Path, camera: str | tuple[int, int], output: str | Path) -> dict[str, str]:
    """Write the widened model atomically to ``output``; returns its airq.widen.* metadata."""
    # deferred: onnx: ~0.2 s to import, paid only where used
    import onnx
    from onnx import numpy_helper

    source = Path(source)
    try:
        dst_hw = parse_camera(camera)
    except ConfigError as e:
        raise UserError(f"--camera: {e}") from None
    if not source.is_file():
        raise UserError(f"{source}: no such file")
    data = source.read_bytes()
    try:
        model = onnx.load_from_string(data)
    except Exception as e:  # noqa: BLE001 - any decode failure means "not an ONNX file"
        raise UserError(f"{source}: not an ONNX model ({type(e).__name__})") from None
    meta = {p.key: p.value for p in model.metadata_props}
    if meta.get("airq.precision", "fp32") != "fp32":
        raise UserError(f"{source}: precision {meta['airq.precision']}; widen the fp32 model, then quantize")
    inputs = [i for i in model.graph.input if i.name == "obs"]
    if len(inputs) != 1:
        raise UserError(f"{source}: expected an input named 'obs'")
    node, trans_b = _first_gemm(model)
    inits = {t.name: t for t in model.graph.initializer}
    if node.input[1] not in inits:
        raise UserError(f"{source}: the first layer's weights are not an initializer")
    w = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
    w = w if trans_b else w.T  # (out, in)
    obs_dim = w.shape[1]
    src_hw = _source_camera(meta, obs_dim)
    if dst_hw[0] < src_hw[0] or dst_hw[1] < src_hw[1]:
        raise UserError(f"--camera {dst_hw[0]}x{dst_hw[1]} is smaller than the source's {src_hw[0]}x{src_hw[1]}")
    n_pix, n_hidden = src_hw[0] * src_hw[1], w.shape[0]
    new_dim = dst_hw[0] * dst_hw[1] + N_STATE_FEATURES
    est = 4 * w.shape[0] * new_dim + len(data)
    if est > ONNX_MAX_BYTES:
        raise UserError(f"the widened model would be about {est / 1e9:.2f} GB, above ONNX's 2 GB protobuf limit")
    t0 = time.perf_counter()
    w_big = np.empty((w.shape[0], new_dim), dtype=np.float32)
    w_big[:, : new_dim - N_STATE_FEATURES] = widen_depth_weights(w[:, :n_pix], src_hw, dst_hw)
    w_big[:, new_dim - N_STATE_FEATURES :] = w[:, n_pix:]
    del w
    tensor = numpy_helper.from_array(w_big if trans_b else np.ascontiguousarray(w_big.T), node.input[1])
    del w_big
    inits[node.input[1]].CopyFrom(tensor)
    del tensor
    dim = inputs[0].type.tensor_type.shape.dim[1]
    dim.Clear()
    dim.dim_value = new_dim
    del model.graph.value_info[:]  # stale shapes of the old input width

    cfg_dict = json.loads(meta.get("airq.env_config") or "{}")
    level = meta.get("airq.level") or cfg_dict.get("level") or "default"
    try:
        big_cfg = load_level(level, camera_overrides(dst_hw))
    except ConfigError as e:
        raise UserError(f"{source}: cannot rebuild its level {level!r}: {e}") from None
    if cfg_dict:
        cfg_dict["camera"] = big_cfg.to_dict()["camera"]
    else:
        cfg_dict = big_cfg.to_dict()
    cam = big_cfg.camera
    widen_meta = {
        WIDEN_PREFIX + "method": (
            f"first-layer depth columns W ({n_hidden} x {n_pix}) composed with a fixed "
            f"area-resampling operator R ({n_pix} x {dst_hw[0] * dst_hw[1]}, "
            f"{dst_hw[0]}x{dst_hw[1]} -> {src_hw[0]}x{src_hw[1]}): W' = W R; state columns and "
            "later layers unchanged; acts as the source on the area-downsampled image; not trained"
        ),
        WIDEN_PREFIX + "camera": f"{dst_hw[0]}x{dst_hw[1]}",
        WIDEN_PREFIX + "source_camera": f"{src_hw[0]}x{src_hw[1]}",
        WIDEN_PREFIX + "source_file": source.name,
        WIDEN_PREFIX + "source_sha256": hashlib.sha256(data).hexdigest(),
        WIDEN_PREFIX + "source_size_bytes": str(len(data)),
    }
    updates = {
        "airq.obs_dim": str(new_dim),
        "airq.env_config": json.dumps(cfg_dict),
        "airq.observation_layout": (
            f"float32[{new_dim}]: [0:{new_dim - N_STATE_FEATURES}] depth {dst_hw[0]}x{dst_hw[1]} (height x width) row-major "
            f"from top-left, {cam.fov_deg:g} x {cam.vfov_deg or cam.fov_deg:g} degree view, /max_range {cam.max_range} m, "
            f"in [0,1]; [{new_dim - N_STATE_FEATURES}:{new_dim}] goal distance/arena diagonal, sin, cos of goal bearing "
            "(ccw from nose), forward, left, up velocity/max_speed, yaw rate/max_yaw_rate, altitude/ceiling"
        ),
        "airq.success_eval": json.dumps(
            {
                "source": f"the source policy {source.name} at {src_hw[0]}x{src_hw[1]} "
                "(airq.success_rate is the source's); see policies.widen --check-episodes"
            }
        ),
        **widen_meta,
    }
    merged = meta | updates
    del model.metadata_props[:]
    for k, v in merged.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    model.producer_name = "airq.policies.widen"
    model.ir_version = min(model.ir_version or MAX_IR_VERSION, MAX_IR_VERSION)
    onnx.checker.check_model(model)
    blob = model.SerializeToString()
    del model
    write_atomic(output, blob)
    widen_meta[WIDEN_PREFIX + "seconds"] = f"{time.perf_counter() - t0:.1f}"
    widen_meta[WIDEN_PREFIX + "size_bytes"] = str(len(blob))
    return widen_meta


def _session(path: Path, threads: int = 1):
    # deferred: onnxruntime: ~0.2 s to import, paid only where used
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(f"{path}: not a loadable ONNX model ({first[:200]})") from None


def check_large_policy(
    model: str | Path,
    source: str | Path,
    episodes: int = 50,
    seed: int = 0,
    level: str = "default",
    num_envs: int = 10,
    threads: int = 1,
) -> dict:
    """Fly ``episodes`` seeded episodes (seeds seed..seed+N-1) with ``model`` at its own camera; the
    source acts on the same states' source-size observations (two envs in lockstep: the camera does
    not change the dynamics). Returns agreement, success of both (the source flying its own episodes
    at its camera over the same seeds), and timing."""
    if episodes < 1:
        raise UserError(f"--check-episodes must be >= 1, got {episodes}")
    model, source = Path(model), Path(source)
    for p in (model, source):
        if not p.is_file():
            raise UserError(f"{p}: no such file")
    big_sess, src_sess = _session(model, threads), _session(source, threads)
    big_meta = dict(big_sess.get_modelmeta().custom_metadata_map)
    src_meta = dict(src_sess.get_modelmeta().custom_metadata_map)
    big_cfg = load_level(level, observation_overrides_from_metadata(big_meta))
    src_cfg = load_level(level, observation_overrides_from_metadata(src_meta))
    for sess, cfg, p in ((big_sess, big_cfg, model), (src_sess, src_cfg, source)):
        if sess.get_inputs()[0].shape[1] != cfg.obs_dim:
            raise UserError(
                f"{p}: input size {sess.get_inputs()[0].shape[1]} does not match its camera's observation size {cfg.obs_dim}"
            )

    def act(sess, obs):
        return sess.run(["action"], {"obs": np.ascontiguousarray(obs, dtype=np.float32)})[0].astype(np.int64)

    same = total = 0
    outcomes: list[str] = []
    infer_s, t0 = 0.0, time.perf_counter()
    for start in range(0, episodes, num_envs):
        n = min(num_envs, episodes - start)
        seeds = [seed + start + i for i in range(n)]
        big = NavVectorEnv(n, config=big_cfg, autoreset_mode=AutoresetMode.DISABLED)
        small = NavVectorEnv(n, config=src_cfg, autoreset_mode=AutoresetMode.DISABLED)
        ob, _ = big.reset(seed=seeds)
        os_, _ = small.reset(seed=seeds)
        active = np.ones(n, bool)
        result = [""] * n
        while active.any():
            t = time.perf_counter()
            a_big = act(big_sess, ob)
            infer_s += time.perf_counter() - t
            a_src = act(src_sess, os_)
            same += int(np.sum((a_big == a_src)[active]))
            total += int(active.sum())
            ob, _, te, tr, info = big.step(a_big)
            os_, *_ = small.step(a_big)  # the same actions: the same states
            done = (te | tr) & active
            for i in np.flatnonzero(done):
                result[i] = episode_outcome(info, i)
            active &= ~done
        outcomes += result
    wall = time.perf_counter() - t0
    src_results = list(run_episodes(lambda o: act(src_sess, o), src_cfg, episodes, seed, num_envs=num_envs))
    src_summary = summarize(src_results)
    k = outcomes.count("success")

    return {
        "model": str(model),
        "source": str(source),
        "level": level,
        "episodes": episodes,
        "seeds": [seed, seed + episodes - 1],
        "camera": f"{big_cfg.camera.height}x{big_cfg.camera.width}",
        "source_camera": f"{src_cfg.camera.height}x{src_cfg.camera.width}",
        "action_agreement": same / total if total else None,
        "states": total,
        "success_rate": k / episodes,
        "success_ci95": list(wilson_interval(k, episodes)),
        "collision_rate": outcomes.count("collision") / episodes,
        "timeout_rate": outcomes.count("timeout") / episodes,
        "source_success_rate": src_summary["success_rate"],
        "source_success_ci95": src_summary["success_ci95"],
        "batched_inference_ms_per_state": 1e3 * infer_s / max(total, 1),
        "wall_s": wall,
    }


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m policies.widen", description=__doc__.split("\n")[0])
    p.add_argument("source", help="the trained fp32 policy ONNX file (e.g. models/policy3_fp32.onnx)")
    p.add_argument("--camera", help="large depth image HEIGHTxWIDTH, e.g. 144x256 (Air Learning's) or 'airlearning'")
    p.add_argument(
        "-o",
        "--output",
        type=output_file,
        help="ONNX file to write (generated: keep it under out/ or .cache/, never commit it)",
    )
    p.add_argument(
        "--check",
        metavar="MODEL",
        help="check an existing large model (e.g. its int8) against the source instead of building",
    )
    p.add_argument("--check-episodes", type=int, default=0, help="seeded episodes for agreement and success (0: none)")
    p.add_argument("--seed", type=int, default=0, help="first episode seed of the check")
    p.add_argument("--level", default="default")
    p.add_argument("--report", type=output_file, help="write the check's figures as JSON here")
    args = p.parse_args(argv)
    if args.check_episodes < 0:
        raise UserError(f"--check-episodes must be >= 0, got {args.check_episodes}")
    if args.check:
        if args.camera or args.output:
            raise UserError("--check takes an existing model: no --camera or -o")
        target = Path(args.check)
        if args.check_episodes == 0:
            args.check_episodes = 50
    else:
        if not args.camera or not args.output:
            raise UserError("building needs --camera HxW and -o OUTPUT (or use --check MODEL)")
        meta = widen_model(args.source, args.camera, args.output)
        target = Path(args.output)
        print(
            f"wrote {target} ({target.stat().st_size / 1e6:.1f} MB, {meta[WIDEN_PREFIX + 'seconds']} s): "
            f"{meta[WIDEN_PREFIX + 'camera']} from {meta[WIDEN_PREFIX + 'source_file']} "
            f"(sha256 {meta[WIDEN_PREFIX + 'source_sha256'][:12]})"
        )
    if args.check_episodes:
        r = check_large_policy(target, args.source, args.check_episodes, args.seed, args.level)
        lo, hi = r["success_ci95"]
        print(
            f"{target.name} at {r['camera']} vs {Path(args.source).name} at {r['source_camera']}, {r['episodes']} episodes "
            f"(seeds {r['seeds'][0]}-{r['seeds'][1]}): action agreement {r['action_agreement']:.2%} over {r['states']} states; "
            f"success {r['success_rate']:.1%} ({lo:.1%}-{hi:.1%}), source {r['source_success_rate']:.1%}"
        )
        if args.report:
            write_json(args.report, r)
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
