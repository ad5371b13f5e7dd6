"""The closed loop for one policy: env observation -> bridge -> action -> env, episode after episode.

Episode ``j`` is ``reset(seed=seed + j)``, so every policy meets the same episodes.

Failing safe (PX4's offboard rule, host side): every act has a deadline derived from the control
period. When the reply is not back in time the simulated vehicle gets the fail-safe action (hover)
for that step, the miss is counted, and the loop goes on with the next observation - a late action
is never applied. A streak of misses that loses the connection or lasts ``outage_after_s`` is an
*outage*: it is logged, the socket is reopened (Lazy Pirate), a supervisor may restart a dead local
bridge, and once the bridge answers again the policy is verified by sha256 and re-uploaded if the
bridge lost it. Episodes that lived through an outage are marked. When the outage outlasts
``max_outage_s`` the link gives up (LinkLost) with one line that also says what the bridge's own status
reports over a fresh connection (requests received, BUSY replies, requests and replies dropped), or that
none could be read either.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

import gymnasium as gym
import numpy as np

from firmware_bridge.client import (
    ActResult,
    BridgeBusy,
    BridgeClient,
    BridgeError,
    BridgeRefused,
    BridgeStatus,
    BridgeUnreachable,
)
from firmware_bridge.protocol import ErrorCode, sha256_hex
from nav_env.actions import HOVER_ACTION
from nav_env.backends import make_env
from nav_env.config import NavConfig
from nav_env.latency import LatencySource
from nav_env.rollout import EpisodeResult, episode_outcome

if TYPE_CHECKING:
    from nav_env.env import NavEnv

STATUS_PERIOD_S = 0.5  # how often device memory is sampled during a run
DEADLINE_FRACTION = 0.8  # of the control period: the rest is for stepping the simulator
OUTAGE_AFTER_S = 0.5  # a miss streak this long is an outage even if the connection looks up
MAX_OUTAGE_S = 60.0  # give up (the log stays valid; --resume continues) after this long without a bridge

Event = dict[str, Any]
# per episode row
LINK_COUNTS = ("outages", "outage_s", "bridge_restarts", "policy_uploads", "vehicle_link_errors", "pilot_acts")


class LinkLost(BridgeError):
    """The bridge stayed unreachable for longer than the run's max outage."""


class Supervisor(Protocol):
    """Restarts a local bridge that died (hil.run --sim-only); a remote device has none."""

    def check(self) -> Event | None:
        """Called on every miss: restart the bridge if it is dead; return an event if anything happened."""


def event_record(event: str, **fields: Any) -> Event:
    """One ``event`` line of the run log, stamped with both clocks."""
    return {"kind": "event", "event": event, "t_mono": time.monotonic(), "t_wall": time.time(), **fields}


def failsafe_action(cfg: NavConfig) -> int | np.ndarray:
    """Hover: zero velocity and yaw rate, the same hold the device's watchdog commands."""
    return HOVER_ACTION if cfg.task.action_type == "discrete" else np.zeros(4, dtype=np.float32)


def default_deadline_s(cfg: NavConfig, rate_hz: float | None) -> float:
    """The act deadline: a fraction of the control period (--rate-hz, else the simulator's dt)."""
    period_s = 1.0 / rate_hz if rate_hz else cfg.vehicle.dt
    return DEADLINE_FRACTION * period_s


@dataclass
class PolicyUpload:
    """What must be loaded on the bridge, kept so a restarted bridge can get it again."""

    onnx: bytes
    name: str

    @property
    def sha256(self) -> str:
        return sha256_hex(self.onnx)


@dataclass
class LinkStats:
    deadline_misses: int = 0
    outages: int = 0
    outage_s: float = 0.0
    policy_uploads: int = 0  # re-uploads after the bridge lost the policy
    policy_verifications: int = 0
    bridge_restarts: int = 0
    vehicle_link_errors: int = 0  # acts the bridge refused because its autopilot link was lost (VEHICLE_LINK)
    pilot_acts: int = 0  # acts answered while a pilot had the vehicle (the reply's vehicle.control): nothing was sent


class ControlLink:
    """Deadline-bound acts with fail-safe bookkeeping, outage detection and policy recovery."""

    def __init__(
        self,
        client: BridgeClient,
        deadline_s: float,
        policy: PolicyUpload | None = None,
        *,
        supervisor: Supervisor | None = None,
        on_event: Callable[[Event], None] | None = None,
        outage_after_s: float = OUTAGE_AFTER_S,
        max_outage_s: float = MAX_OUTAGE_S,
    ) -> None:
        self.client = client
        self.deadline_s = deadline_s
        self.policy = policy
        self.supervisor = supervisor
        self.on_event = on_event
        self.outage_after_s = outage_after_s
        self.max_outage_s = max_outage_s
        # The link retries an unanswered request itself until max_outage_s, so the client's own status probe (a
        # second per give-up) is off: the link asks for the bridge's status once, when it gives up.
        self.status_probe_s = client.status_probe_s
        client.status_probe_s = 0.0
        self._last_why = ""  # why the latest request went unanswered, for the give-up line
        self.stats = LinkStats()
        self.context: dict[str, Any] = {}  # policy/episode/step, stamped on every event
        self._verified_connections = client.connection_count()
        self._must_verify = False
        self._last_reply = time.monotonic()
        # When the first request still unanswered was sent: the outage clock. Not the last reply: a host
        # busy between requests (a slow simulator reset, rendering) is no silence of the bridge.
        self._silent_since: float | None = None
        self._streak_start: float | None = None  # monotonic time of the first fail-safe of a miss streak
        self._streak_misses = 0
        self._in_outage = False
        self._last_reconnect = 0.0
        self.episode_outage = False  # set when an outage touches the current episode
        self._pilot_has_control = False  # the last reply said a pilot has the vehicle
        self.free_running = True  # run_closed_loop clears it when it paces the loop itself

    # ------------------------------------------------------------------ events

    def emit(self, event: str, **fields: Any) -> None:
        if self.on_event:
            self.on_event(event_record(event, **(self.context | fields)))

    # ------------------------------------------------------------------ acting

    def act(self, obs: np.ndarray) -> ActResult | None:
        """The device's action for ``obs``, or None: apply the fail-safe for this step."""
        start = time.monotonic()
        deadline = start + self.deadline_s
        if self._silent_since is None:
            self._silent_since = start
        result = self._request_act(obs, deadline)
        if isinstance(result, str):
            self._miss(deadline, why=result)
            return None
        self._on_reply()
        vehicle = result.vehicle or {}
        pilot = vehicle.get("control") == "pilot"
        if pilot:
            self.stats.pilot_acts += 1
            if not self._pilot_has_control:
                self.emit("pilot_has_control", mode=vehicle.get("mode"))
        self._pilot_has_control = pilot
        return result

    def _request_act(self, obs: np.ndarray, deadline: float) -> ActResult | str:
        """The act's reply, or why there is none to apply by ``deadline``."""
        try:
            if self._needs_verify() and not self._verify(deadline, self._attempt_timeout_s()):
                return "policy not verified"
            withheld = self.client.withheld
            result = self.client.act_within(obs, max(deadline - time.monotonic(), 1e-4))
        except BridgeBusy:
            return "bridge busy: its peer cap is full"  # nothing was executed
        except BridgeRefused as exc:
            if exc.code == ErrorCode.VEHICLE_LINK:  # the bridge is up, its autopilot is not: nothing was sent
                self.stats.vehicle_link_errors += 1
                if self._streak_start is None:
                    self.emit("vehicle_link_lost", detail=exc.detail)
                return "the bridge's autopilot link is lost"
            if exc.code != ErrorCode.NO_POLICY:
                raise  # a bad observation or policy is a bug to report, not a network fault
            self._must_verify = True  # a restarted bridge without our policy
            return "bridge has no policy"
        except BridgeUnreachable:
            return "verification timed out"
        if result is None:
            if self.client.withheld > withheld:  # not sent: one request in flight per connection (client.py)
                return "the previous act on this connection is still unanswered"
            return "no reply by the deadline"
        if self._needs_verify():
            # The act went out on a connection made while we waited: it may have reached a restarted
            # bridge running another policy. Not applied; the policy is checked first, next step.
            return "reply came over an unverified new connection"
        return result

    def _needs_verify(self) -> bool:
        return self.policy is not None and (
            self._must_verify or self.client.connection_count() != self._verified_connections
        )

    def _verify(self, deadline: float, timeout_s: float | None = None) -> bool:
        """On a new connection: is our policy (by sha256) loaded? Upload it if not. ``timeout_s``: per
        hello attempt (Lazy Pirate), so a bridge that vanishes again cannot stretch the outage limit."""
        assert self.policy is not None
        connections = self.client.connection_count()
        hello = self.client.hello(timeout_s)
        self.stats.policy_verifications += 1
        loaded = None if hello.policy is None else hello.policy.sha256
        if loaded != self.policy.sha256:
            self._upload(reason="bridge lost the policy" if loaded is None else f"bridge runs another policy {loaded}")
        self._verified_connections = connections
        self._must_verify = False
        return time.monotonic() < deadline

    def _upload(self, reason: str) -> None:
        assert self.policy is not None
        reply = self.client.load_policy(self.policy.onnx, name=self.policy.name)
        if reply.sha256 != self.policy.sha256:
            raise BridgeError(self.client.endpoint, f"bridge loaded sha256 {reply.sha256}, sent {self.policy.sha256}")
        self.stats.policy_uploads += 1
        self.episode_outage = True  # the bridge restarted under this episode
        self.emit("policy_reuploaded", reason=reason, sha256=self.policy.sha256)

    def _miss(self, deadline: float, why: str) -> None:
        """An act without a reply to apply: the fail-safe flies this step."""
        now = time.monotonic()
        if self.free_running and now < deadline:
            # Unpaced loop: a miss still takes its deadline, so a dead bridge does not make the
            # simulator race through hover steps. A paced loop sleeps in its own pacing instead.
            time.sleep(deadline - now)
            now = deadline
        self.stats.deadline_misses += 1
        self._streak_misses += 1
        if self._streak_start is None:
            self.emit("failsafe", why=why, since_last_reply_s=now - self._last_reply)
        self._unanswered(now, why, acting=True)
        if self._in_outage and now - self._last_reconnect >= max(self.outage_after_s, self.client.timeout_s):
            self.client.reconnect()  # Lazy Pirate: a fresh socket, nothing stale queued on it
            self._last_reconnect = now
        self._give_up_if_too_long(now, "acting")

    def _unanswered(self, now: float, why: str, *, acting: bool) -> None:
        """A request without its answer, acting or between episodes: the streak goes on, a dead local bridge is
        restarted, and an outage starts once the link is lost. Acting, that is when the connection is gone, the
        bridge restarted or the streak lasts ``outage_after_s``; between episodes, at once (the request has spent
        its Lazy Pirate attempts)."""
        self._last_why = why
        if self._streak_start is None:
            self._streak_start = now
        event = self.supervisor.check() if self.supervisor else None
        if event:
            self.stats.bridge_restarts += event.get("event") == "bridge_restarted"
            self.emit(**event)
        lost = not acting or event is not None or not self.client.connected
        if not self._in_outage and (lost or now - self._streak_start >= self.outage_after_s):
            self._in_outage = True
            self.episode_outage = True
            self.stats.outages += 1
            first_failsafe = self._streak_start if acting else None  # between episodes no fail-safe flies
            self.emit("outage_start", why=why, first_failsafe_mono=first_failsafe, last_reply_mono=self._last_reply)

    def _silent_s(self, now: float) -> float:
        return 0.0 if self._silent_since is None else now - self._silent_since

    def _attempt_timeout_s(self) -> float:
        """Per attempt of a Lazy Pirate request: the client's timeout, or less, so that all its attempts
        end by the time the outage reaches max_outage_s (a give-up then comes on time, not a retry
        cycle later)."""
        left = self.max_outage_s - self._silent_s(time.monotonic())
        return max(min(self.client.timeout_s, left / self.client.attempts_per_request), 1e-3)

    def _give_up_if_too_long(self, now: float, what: str) -> None:
        silent_s = self._silent_s(now)
        if silent_s >= self.max_outage_s:
            last = f" (last: {self._last_why})" if self._last_why else ""
            probe_s = self.status_probe_s
            says = self.client.status_from(probe_s) if probe_s else "the bridge's status was not asked for"
            raise LinkLost(
                self.client.endpoint,
                f"bridge at {self.client.endpoint} unreachable for {silent_s:.1f} s "
                f"(limit {self.max_outage_s:g} s) while {what}{last}; {says}; finished episodes are in the log",
            )

    def _on_reply(self) -> None:
        now = time.monotonic()
        if self._streak_start is not None:
            if self._in_outage:
                self.stats.outage_s += now - self._streak_start
                self.emit("outage_end", duration_s=now - self._streak_start, misses=self._streak_misses)
            if self._streak_misses:
                self.emit("failsafe_released", misses=self._streak_misses, duration_s=now - self._streak_start)
        self._streak_start, self._streak_misses, self._in_outage = None, 0, False
        self._last_why = ""
        self._last_reply = now
        self._silent_since = None

    # ------------------------------------------------------------------ between episodes

    def call(self, what: str, request: Callable[[float], Any]) -> Any:
        """A non-act request (reset, status) that survives an outage: retried until max_outage_s after
        the first unanswered request (not after this call began: an outage that started mid-episode
        has used part of the limit already). ``request(timeout_s)`` sends it with that per-attempt
        timeout, which shrinks as the limit nears, so the give-up comes at the limit."""
        if self._silent_since is None:
            self._silent_since = time.monotonic()
        while True:
            self._give_up_if_too_long(time.monotonic(), f"waiting for {what}")
            timeout_s = self._attempt_timeout_s()
            try:
                if self._needs_verify():
                    self._verify(time.monotonic() + timeout_s, timeout_s)
                reply = request(timeout_s)
                self._on_reply()
                return reply
            except BridgeUnreachable:
                self._unanswered(time.monotonic(), f"{what} unanswered", acting=False)
            except BridgeBusy:
                self._last_why = "bridge busy: its peer cap is full"
                time.sleep(min(timeout_s, 0.1))  # served once another peer leaves; until then, as an outage
            except BridgeRefused as exc:
                if exc.code != ErrorCode.NO_POLICY or self.policy is None:
                    raise
                self._must_verify = True


@dataclass
class LoopRecord:
    """Everything measured in one policy's run."""

    episodes: list[EpisodeResult] = field(default_factory=list)
    episode_rows: list[dict[str, Any]] = field(default_factory=list)  # EpisodeResult + reliability fields
    rtt_ns: list[int] = field(default_factory=list)
    infer_ns: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    loop_s: float = 0.0  # wall time of the flying (first act to last env step of each episode)
    deadline_misses: int = 0  # acts without a reply by their deadline: fail-safe applied instead
    overruns: int = 0  # paced steps that started late (the loop itself was too slow)
    memory: list[tuple[float, int, int]] = field(default_factory=list)  # (t since start, rss, peak)
    frames: dict[int, np.ndarray] = field(default_factory=dict)
    status_start: BridgeStatus | None = None
    status_end: BridgeStatus | None = None
    link: LinkStats = field(default_factory=LinkStats)
    client_counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Timing:
    """How the simulated world's time relates to one policy's acts. Lockstep (``latency`` None): the world waits for
    every act, so each action lands on the observation it was computed for. Latency: each act's delay (from
    ``latency``) is flown as the action's delay in the simulator; ``period_s`` is the control period in simulated
    seconds (None: the level's ``vehicle.dt``), or with ``device_rate`` each step lasts until the action lands (the
    next observation is taken then)."""

    latency: LatencySource | None = None
    period_s: float | None = None
    device_rate: bool = False

    def start_episode(self, seed: int) -> None:
        if self.latency is not None:
            self.latency.start_episode(seed)

    def before_step(self, env: gym.Env, result: ActResult | None, deadline_s: float) -> None:
        if self.latency is None:
            return
        # a missed act: the fail-safe (hover) takes over when its deadline passes
        delay = deadline_s if result is None else self.latency.delay_s(result.rtt_ns)
        # hil.run flies latency on the embedded simulator only (check_args), whose env has set_latency
        nav = cast("NavEnv", env.unwrapped)
        nav.set_latency(delay, max(delay, 1e-6) if self.device_rate else self.period_s)

    def describe(self) -> dict[str, Any]:
        if self.latency is None:
            return {"mode": "lockstep"}
        period = "device (the next observation when the action lands)" if self.device_rate else self.period_s
        return {"mode": "latency", **self.latency.describe(), "period_s": period}


LOCKSTEP = Timing()


def run_closed_loop(
    client: BridgeClient,
    cfg: NavConfig,
    episodes: int | Sequence[int],
    seed: int,
    *,
    rate_hz: float | None = None,
    keep_trajectories: int = 3,
    on_episode: Callable[[EpisodeResult, LoopRecord], None] | None = None,
    env: gym.Env | None = None,
    link: ControlLink | None = None,
    deadline_s: float | None = None,
    timing: Timing = LOCKSTEP,
) -> LoopRecord:
    """Fly seeded episodes (a count, or the episode indices to fly); ``env`` defaults to the embedded
    simulator for ``cfg``. ``rate_hz`` paces the loop on the wall clock (None: free-running). ``link`` brings
    fail-safe recovery (policy re-upload, supervisor, events); without one a plain link with the default
    deadline is used. ``timing``: lockstep (the simulated world waits for every act) or latency."""
    env = env if env is not None else make_env(cfg, render_mode="rgb_array")
    link = link or ControlLink(client, deadline_s or default_deadline_s(cfg, rate_hz))
    indices = list(range(episodes)) if isinstance(episodes, int) else list(episodes)
    hover = failsafe_action(cfg)
    rec = LoopRecord(link=link.stats)
    period_ns = int(1e9 / rate_hz) if rate_hz else 0
    link.free_running = not period_ns
    t_start = time.perf_counter()
    rec.status_start = link.call("status", lambda t: client.status(timeout_s=t))
    next_status = t_start + STATUS_PERIOD_S
    _sample_memory(rec, rec.status_start, t_start)
    logged: dict[str, float] = {}
    for n, j in enumerate(indices):
        acts_before, overruns_before = len(rec.rtt_ns), rec.overruns
        obs, info = env.reset(seed=seed + j)
        timing.start_episode(seed + j)
        link.context.update(episode=j, step=0)
        link.call("reset", lambda t: client.reset(timeout_s=t))
        link.episode_outage = False
        misses_before = link.stats.deadline_misses
        ret, done, steps = 0.0, False, 0
        t_ep = time.perf_counter_ns()
        deadline = t_ep + period_ns
        while not done:
            link.context["step"] = steps
            result = link.act(obs)
            timing.before_step(env, result, link.deadline_s)
            obs, reward, terminated, truncated, info = env.step(hover if result is None else result.action)
            steps += 1
            ret += float(reward)
            done = terminated or truncated
            if result is not None:
                rec.rtt_ns.append(result.rtt_ns)
                rec.infer_ns.append(result.infer_ns)
                rec.seqs.append(result.seq)
            if period_ns:
                now_ns = time.perf_counter_ns()
                if now_ns > deadline:
                    rec.overruns += 1
                    deadline = now_ns + period_ns  # re-phase after an overrun instead of bursting to catch up
                else:
                    _sleep_until(deadline)
                    deadline += period_ns
        loop_s = (time.perf_counter_ns() - t_ep) / 1e9
        rec.loop_s += loop_s
        outcome = episode_outcome(info)
        ep = EpisodeResult(
            episode=j,
            seed=seed + j,
            zone=info["zone"],
            outcome=outcome,
            steps=info["steps"],
            episode_return=ret,
            path_length=info["path_length"],
            start_distance=info["start_distance"],
            straight_distance=info["start_distance"] - cfg.task.success_radius,
            flight_time=info.get("flight_time"),
            physics=info.get("physics"),
        )
        misses = link.stats.deadline_misses - misses_before
        rec.episodes.append(ep)
        # Per-episode shares of the link's and client's counters (since the previous episode ended) and
        # the episode's latency samples: what a report resumed from the log needs to add up every
        # session, not only the last, and to rebuild a policy's summary (hil.report.summarize_run).
        counted: dict[str, float] = {k: getattr(link.stats, k) for k in LINK_COUNTS} | client.reliability_counters()
        rec.episode_rows.append(
            {
                "failsafe_steps": misses,
                "spans_outage": link.episode_outage,
                **{k: counted[k] - logged.get(k, 0) for k in counted},
                "acts": len(rec.rtt_ns) - acts_before,
                "loop_s": loop_s,
                "overruns": rec.overruns - overruns_before,
                "rtt_ns": rec.rtt_ns[acts_before:],
                "infer_ns": rec.infer_ns[acts_before:],
            }
        )
        logged = counted
        rec.deadline_misses = link.stats.deadline_misses
        if n < keep_trajectories and hasattr(env, "trajectory"):
            frame = env.render()
            if isinstance(frame, np.ndarray):  # rgb_array: one picture
                rec.frames[j] = frame
        now = time.perf_counter()
        if now >= next_status or n == len(indices) - 1:
            _sample_memory(rec, link.call("status", lambda t: client.status(timeout_s=t)), t_start)
            rec.episode_rows[-1]["memory"] = list(rec.memory[-1])  # the device's memory, for a rebuilt summary
            next_status = now + STATUS_PERIOD_S
        if on_episode:
            on_episode(ep, rec)
    rec.status_end = link.call("status", lambda t: client.status(timeout_s=t))
    rec.client_counters = client.reliability_counters()
    return rec


def _sample_memory(rec: LoopRecord, status: BridgeStatus, t_start: float) -> None:
    rec.memory.append((time.perf_counter() - t_start, status.rss_bytes or 0, status.peak_rss_bytes or 0))


def _sleep_until(deadline_ns: int) -> None:
    # sleep most of the wait, then spin: time.sleep overshoots by tens of microseconds
    remaining = deadline_ns - time.perf_counter_ns()
    if remaining > 300_000:
        time.sleep((remaining - 200_000) / 1e9)
    while time.perf_counter_ns() < deadline_ns:
        pass
