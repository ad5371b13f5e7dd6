"""actorq.holder: an actor swaps whole onnxruntime sessions between rollouts, never a half-loaded model.

Each weight version here has its own weights, so its logits on a fixed batch identify it: an actor that
acted with a mix of two versions (or a session not yet fully built) would produce logits equal to neither.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from actorq.errors import ActorQError
from actorq.holder import ActorSession, Prepared, VersionTiming
from actorq.nets import actor_weights, mlp_actor
from actorq.weights import BuildTiming, ModelVersion, make_template
from quantize.runtime import session as build_session

VERSIONS = 12


@pytest.fixture(scope="module", params=["fp32", "int8"])
def versions(request):
    """(models by version 0..VERSIONS, expected logits by version on OBS, OBS) for a 256-wide MLP."""
    actor = mlp_actor((256, 256), seed=1)
    rng = np.random.default_rng(0)
    obs = rng.uniform(0, 1, (64, 1032)).astype(np.float32)
    template = make_template(actor, request.param, calibration_obs=obs)
    weights = actor_weights(actor)
    models, expected = [], []
    for v in range(VERSIONS + 1):
        w = {k: (x + rng.standard_normal(x.shape) * 0.05 * x.std()).astype(np.float32) for k, x in weights.items()}
        model = template.build(w, v)
        models.append(model)
        expected.append(build_session(model.onnx).run(["logits"], {"obs": obs})[0])
    for a in range(len(expected)):  # every version is told apart by its logits
        assert all(not np.array_equal(expected[a], expected[b]) for b in range(a))
    return models, expected, obs


def test_versions_change_only_at_swap(versions):
    models, expected, obs = versions
    holder = ActorSession()
    with pytest.raises(ActorQError, match="no weight version"):
        holder.act(obs)
    assert holder.load(models[0]) is not None and holder.version == 0
    prepared = holder.prepare(models[2])
    assert isinstance(prepared, Prepared) and prepared.version == 2 and prepared.session_s > 0
    assert holder.version == 0 and holder.pending_version == 2  # mid-rollout: still version 0
    acted = holder.act(obs)
    assert acted.version == 0 and np.array_equal(acted.logits, expected[0])
    assert holder.prepare(models[1]) is None  # older than the pending version: a late delivery
    assert holder.swap() == 2 and holder.pending_version is None
    acted = holder.act(obs)
    assert acted.version == 2 and np.array_equal(acted.logits, expected[2])
    assert np.array_equal(acted.action, expected[2].argmax(1))
    assert holder.prepare(models[2]) is None and holder.swap() == 2
    timing = VersionTiming.of(models[2], prepared)
    assert timing.total_s == pytest.approx(
        models[2].timing.requantize_s + models[2].timing.serialize_s + prepared.session_s
    )
    assert timing.onnx_bytes == len(models[2].onnx) and timing.precision == models[2].precision


def test_a_model_that_does_not_load_leaves_the_actor_acting(versions):
    models, expected, obs = versions
    holder = ActorSession()
    holder.load(models[3])
    broken = ModelVersion(4, models[3].precision, models[4].onnx[: len(models[4].onnx) // 2], BuildTiming(0, 0))
    with pytest.raises(ActorQError, match="cannot load"):
        holder.prepare(broken)
    mislabelled = ModelVersion(9, models[3].precision, models[5].onnx, BuildTiming(0, 0))
    with pytest.raises(ActorQError, match="says it is version '5'"):
        holder.prepare(mislabelled)
    assert holder.swap() == 3
    acted = holder.act(obs)
    assert acted.version == 3 and np.array_equal(acted.logits, expected[3])


@pytest.mark.parametrize("swapper", ["acting thread", "loading thread"])
def test_swap_is_atomic_while_acting(versions, swapper):
    """One thread acts without pause; versions 1..12 arrive from another (with stale re-deliveries). Every
    action batch must be exactly one version's, and versions never go back. ``acting thread``: the actor
    swaps every 3 acts (between its rollouts); ``loading thread``: the loader swaps as soon as it prepared,
    while an act may be running (the act finishes on the session it started with)."""
    models, expected, obs = versions
    holder = ActorSession()
    holder.load(models[0])
    seen: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def act() -> None:
        try:
            n = 0
            while True:
                last = done.is_set() and holder.pending_version is None  # this act sees the final version
                acted = holder.act(obs)
                if not np.array_equal(acted.logits, expected[acted.version]):
                    raise AssertionError(f"logits of no single version (labelled {acted.version})")
                if seen and acted.version < seen[-1]:
                    raise AssertionError(f"version went back from {seen[-1]} to {acted.version}")
                seen.append(acted.version)
                n += 1
                if last:
                    break
                if swapper == "acting thread" and n % 3 == 0:
                    holder.swap()
        except BaseException as e:  # report to the main thread
            errors.append(e)

    thread = threading.Thread(target=act)
    thread.start()
    try:
        for v in range(1, VERSIONS + 1):
            assert holder.prepare(models[v]) is not None
            assert holder.prepare(models[v - 1]) is None  # a late re-delivery is ignored
            if swapper == "loading thread":
                holder.swap()
            time.sleep(0.01)
    finally:
        done.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert not errors, errors[0]
    assert seen[-1] == VERSIONS and holder.version == VERSIONS
    assert seen == sorted(seen) and len(set(seen)) >= 3
