"""The actor's side of a weight version: one onnxruntime session, replaced whole between rollouts.

    holder = ActorSession()
    holder.prepare(model_version)      # any thread: builds the new session completely, keeps it pending
    holder.swap()                      # the acting thread, between rollouts: the pending session takes over
    acted = holder.act(obs)            # acted.version: the weight version these actions came from

An actor never acts with a half-loaded model: ``prepare`` builds the new session before anything points
to it, and ``swap`` replaces the current (version, session) pair by one reference assignment, so an
``act`` running at that moment finishes on the session it started with. A session that fails to build
leaves the current one in place. Versions only increase: a version not newer than the current or pending
one (a late delivery) is ignored. Until the next swap both sessions are in memory.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort

from actorq.errors import ActorQError
from actorq.versions import VERSION_KEY, ModelVersion
from quantize.runtime import session as runtime_session


@dataclass(frozen=True)
class Prepared:
    """A weight version made into a session, ready to swap in."""

    version: int
    session_s: float  # onnxruntime.InferenceSession from the ONNX bytes


@dataclass(frozen=True)
class VersionTiming:
    """The cost of one weight version, from the learner's weights to an actor's usable session."""

    version: int
    precision: str
    requantize_s: float  # int8: numpy re-quantization into the template; fp32: copying the weights in
    serialize_s: float
    session_s: float
    onnx_bytes: int

    @property
    def total_s(self) -> float:
        return self.requantize_s + self.serialize_s + self.session_s

    @classmethod
    def of(cls, model: ModelVersion, prepared: Prepared) -> VersionTiming:
        if model.version != prepared.version:
            raise ActorQError(f"timing of version {model.version} paired with the session of {prepared.version}")
        return cls(
            model.version,
            model.precision,
            model.timing.requantize_s,
            model.timing.serialize_s,
            prepared.session_s,
            model.size_bytes,
        )


@dataclass(frozen=True)
class Acted:
    """Actions (and logits) for a batch of observations, with the weight version that chose them."""

    version: int
    action: np.ndarray
    logits: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class _Loaded:
    version: int
    precision: str
    session: ort.InferenceSession


class ActorSession:
    """Holds the session an actor acts with; swaps to a new weight version only when told to."""

    def __init__(self, threads: int = 1):
        self.threads = threads
        self._lock = threading.Lock()
        self._current: _Loaded | None = None
        self._pending: _Loaded | None = None

    @property
    def version(self) -> int | None:
        """The weight version the actor acts with now (None before the first swap)."""
        current = self._current
        return None if current is None else current.version

    @property
    def pending_version(self) -> int | None:
        pending = self._pending
        return None if pending is None else pending.version

    def _newest(self) -> int:
        versions = [x.version for x in (self._current, self._pending) if x is not None]
        return max(versions, default=-1)

    def prepare(self, model: ModelVersion) -> Prepared | None:
        """Build the session of ``model`` completely and keep it pending; None if it is not newer than the
        current or pending version. ActorQError if onnxruntime cannot load it (the current session stays)."""
        with self._lock:
            if model.version <= self._newest():
                return None
        t0 = time.perf_counter()
        try:
            session = runtime_session(model.onnx, threads=self.threads)
        except Exception as e:
            raise ActorQError(
                f"weight version {model.version}: onnxruntime cannot load it ({str(e).splitlines()[0][:200]}); "
                f"still acting with version {self.version}"
            ) from None
        session_s = time.perf_counter() - t0
        tagged = session.get_modelmeta().custom_metadata_map.get(VERSION_KEY)
        if tagged != str(model.version):
            raise ActorQError(f"weight version {model.version}: the model says it is version {tagged!r}")
        with self._lock:
            if model.version <= self._newest():  # a newer one was prepared meanwhile
                return None
            self._pending = _Loaded(model.version, model.precision, session)
        return Prepared(model.version, session_s)

    def swap(self) -> int | None:
        """Between rollouts: the pending session (if any) replaces the current one. Returns the version now
        acting."""
        with self._lock:
            if self._pending is not None:
                self._current, self._pending = self._pending, None
            return None if self._current is None else self._current.version

    def load(self, model: ModelVersion) -> Prepared | None:
        """prepare() then swap(): for an actor that takes a new version at once (and for the first one)."""
        prepared = self.prepare(model)
        self.swap()
        return prepared

    def act(self, obs: np.ndarray) -> Acted:
        """Actions and logits for observations float32 [batch, obs_dim], from one weight version."""
        current = self._current  # one read: the whole call uses this session
        if current is None:
            raise ActorQError("no weight version loaded yet: prepare() and swap() one first")
        action, logits = current.session.run(["action", "logits"], {"obs": np.asarray(obs, dtype=np.float32)})
        return Acted(current.version, action, logits)
