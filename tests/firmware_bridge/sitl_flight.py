"""Policy I int8 flies a real autopilot's SITL build through the real bridge, and the fail-safes are proven on it.

Run inside a private network namespace (SITL binds every interface; ``unshare -n`` leaves it only a loopback,
and nftables there cuts one link without touching the machine's): ``unshare -n python sitl_flight.py
--autopilot ardupilot --binary BIN --params copter.parm --out DIR`` (or ``--autopilot px4 --binary
.../bin/px4``). Used by test_mavlink_sitl.py; prints one JSON line of what it measured:

1. **episodes**: ``python -m hil.run --sim-only --backend autopilot --level easy --takeoff-m 5`` (the bridge a
   local process with ``--actuator mavlink``): take-off through the bridge's vehicle commands, then seeded episodes;
   success, actuation rate and round trip from its report;
2. **fail-safe**: a host (this script: the bridge, nav_env.autopilot's env, the policy's acts) flies an episode and
   stops sending mid-flight; from the vehicle's telemetry: when the bridge held (its status), when the vehicle
   began to slow down, the hold mode it reached, its speed two seconds later; and the setpoint-to-motion delay
   (the episode's first act from a standstill to 0.2 m/s of change in the 50 Hz telemetry);
3. **link cut**: ``hil.run`` flies again and the bridge-autopilot link is cut for 6 s (nftables drops its UDP
   port); the bridge answers acts VEHICLE_LINK once the autopilot's heartbeat is 3 s old, the host counts them
   and flies on when the link returns.

The autopilot's links: ArduCopter's SERIAL0 as ``udpclient`` to the bridge (UDP, as a serial line loses what a
cut link carries; over TCP the autopilot would get the setpoints queued during a cut, late) and SERIAL1 (TCP 5762)
to the ground station; PX4's onboard MAVLink instance (UDP 14540) to the bridge and its GCS instance (UDP 14550)
to the ground station.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from firmware_bridge.client import BridgeClient, BridgeRefused  # noqa: E402
from firmware_bridge.launcher import BridgeProcess  # noqa: E402
from firmware_bridge.mavlink_link import speak_mavlink2  # noqa: E402
from hil.autopilot import prepare_vehicle  # noqa: E402
from hil.sitl import LINKS, SIGNED_LINKS, SitlLinks, start_sitl, stop_sitl  # noqa: E402
from nav_env.autopilot import AutopilotNavEnv  # noqa: E402

POLICY = REPO / "models" / "policy1_int8.onnx"


def hil_run(
    autopilot: str, out: Path, episodes: int, seed: int, links: SitlLinks | None = None, extra: tuple[str, ...] = ()
) -> subprocess.Popen:
    links = links or LINKS[autopilot]
    cmd = [sys.executable, "-m", "hil.run", "--policy", str(POLICY), "--sim-only", "--backend", "autopilot",
           "--level", "easy", "--fc", links.fc, "--telemetry", links.telemetry, "--takeoff-m", "5",
           "--episodes", str(episodes), "--seed", str(seed), "--out", str(out), "--quiet", *extra]  # fmt: skip
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float) -> None:
    stdout, stderr = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"hil.run exited {proc.returncode}: {stderr.strip()[-2000:]}")


def episodes_phase(
    autopilot: str, out: Path, episodes: int, links: SitlLinks | None = None, extra: tuple[str, ...] = ()
) -> dict:
    finish(hil_run(autopilot, out, episodes, seed=0, links=links, extra=extra), timeout=300 + 60 * episodes)
    report = json.loads((out / "report.json").read_text())
    run = report["runs"][0]
    outcomes = [e["outcome"] for e in run["episodes"]]
    return {
        "vehicle": {k: v for k, v in report["vehicle"].items() if k != "bridge_actuator"},
        "episodes": len(outcomes),
        "successes": outcomes.count("success"),
        "collisions": outcomes.count("collision"),
        "timeouts": outcomes.count("timeout"),
        "actuation_hz": round(run["actuation_hz"], 2),
        "round_trip_us": run["round_trip_us"],
        "device_inference_us": run["device_inference_us"],
        "deadline_misses": run["deadline_misses"],
        "setpoints_sent": report["vehicle"]["bridge_actuator"]["setpoints_sent"],
        "acts": run["acts"],
        "bridge_rss_mb": round(run["device_memory"]["peak_rss_bytes"] / 2**20, 1),
    }


def failsafe_phase(autopilot: str, stop_speed_mps: float = 1.5, max_steps: int = 80) -> dict:
    fc, telemetry = LINKS[autopilot].fc, LINKS[autopilot].telemetry
    bridge = BridgeProcess(["--actuator", "mavlink", "--fc", fc, "--policy", str(POLICY)]).start()
    env = AutopilotNavEnv(level="easy", telemetry=telemetry)
    client = BridgeClient(bridge.endpoint)
    out: dict = {}
    try:
        prepare_vehicle(client, env, 5.0, 120.0)
        t = env.telemetry
        t.request_interval(85, 50.0)  # POSITION_TARGET_LOCAL_NED: the velocity the autopilot is asked to fly
        obs, _ = env.reset(seed=1000)
        first_move: tuple[float, np.ndarray, float] | None = None  # (when, direction in NED, speed along it then)
        last_act = time.monotonic()
        for step in range(max_steps):  # fly until the vehicle is well under way, then stop
            result = client.act(obs)
            last_act = time.monotonic()
            if first_move is None and result.setpoint and np.linalg.norm(result.setpoint[:3]) >= 1.0:
                # the setpoint's direction in NED (forward-left-up at the vehicle's heading -> north-east-down)
                vx, vy, vz = result.setpoint[:3]
                yaw = t.attitude.yaw_ned
                d = np.array([vx * np.cos(yaw) + vy * np.sin(yaw), vx * np.sin(yaw) - vy * np.cos(yaw), -vz])
                d /= np.linalg.norm(d)
                first_move = (last_act, d, float(t.pose.velocity_ned @ d))
            obs, _, terminated, truncated, _ = env.step(result.action)
            if terminated or truncated:
                raise RuntimeError(f"the fail-safe episode ended at step {step} before the vehicle was under way")
            if step >= 10 and np.hypot(*t.pose.velocity_ned[:2]) >= stop_speed_mps:
                break
        # the host stops here: the bridge hears nothing more; the vehicle's telemetry shows what follows
        time.sleep(6.0)  # PX4's Hold flies back to where it began holding: watch it settle there
        status = client.status().actuator
        poses = [(w, float(np.hypot(*pose.velocity_ned[:2]))) for w, pose in list(t.poses)]
        after = [(w, v) for w, v in poses if w >= last_act]
        stop_speed = float(np.mean([v for _, v in after[:3]]))
        peak = max(after[: len(after) // 2], key=lambda wv: wv[1])  # where it stops speeding up
        # the hold bites where the acceleration (over 100 ms windows of the 50 Hz poses) falls 0.5 m/s^2 below
        # its value when the host stopped
        windows = [((after[i + 5][0]), (after[i + 5][1] - after[i][1]) / (after[i + 5][0] - after[i][0]))
                   for i in range(0, len(after) - 5, 5)]  # fmt: skip
        falling = next((w for w, acc in windows if acc <= windows[0][1] - 0.5), None)
        # setpoint to motion: from the first act asking for 1 m/s or more to the first pose whose velocity along
        # that setpoint grew by 0.2 m/s
        moving = None if first_move is None else next(
            (w for w, pose in list(t.poses) if w >= first_move[0] and pose.velocity_ned @ first_move[1] - first_move[2] >= 0.2),
            None,
        )  # fmt: skip
        # the autopilot's own account of the hold: its velocity target (50 Hz) set to zero (PX4), or no longer sent
        # because the mode left GUIDED (ArduCopter streams guided targets only)
        targets = [(w, m) for w, m in list(t.targets) if w > last_act]
        changed = next(
            (w for w, m in targets if math.hypot(m.vx, m.vy) < 0.05 and not m.type_mask & 0x38), None
        )  # fmt: skip
        how = "velocity target zero"
        if changed is None and targets and targets[-1][0] < last_act + 5.0:
            changed, how = targets[-1][0] + 0.02, "guided targets stopped (mode changed)"
        out = {
            "speed_at_stop": round(stop_speed, 2),
            "target_changed_after_last_act_ms": None if changed is None else round((changed - last_act) * 1e3, 1),
            "target_change": how,
            "hold_after_last_act_ms": round((status["last_hold_ns"] - status["last_command_ns"]) / 1e6, 1),
            "accel_falling_after_last_act_ms": None if falling is None else round((falling - last_act) * 1e3, 1),
            "peak_speed_after_stop": round(peak[1], 2),
            "slowing_from_after_last_act_ms": round((peak[0] - last_act) * 1e3, 1),
            "speed_trace_after_stop": [[round((w - last_act) * 1e3), round(v, 2)] for w, v in after[:150:5]],
            "hold_mode": status["mode"],
            "speed_2s_after_stop": round(next(v for w, v in after if w >= last_act + 2.0), 2),
            "speed_6s_after_stop": round(after[-1][1], 2),
            **holding(t, last_act + status_hold_s(status)),
            "setpoint_to_motion_ms": None if moving is None else round((moving - first_move[0]) * 1e3, 1),
        }
        obs, _ = env.reset(seed=1001)  # the host returns: its next act takes the vehicle out of the hold
        for _ in range(15):
            obs, *_ = env.step(client.act(obs).action)
        after_return = client.status().actuator
        out["mode_after_host_returns"] = after_return["mode"]
        out["bridge"] = {
            k: after_return.get(k) for k in ("setpoints_sent", "setpoints_withheld", "holds", "statustext")
        }
    finally:
        client.close()
        env.close()
        bridge.close()
    return out


def status_hold_s(status: dict) -> float:
    """Seconds from the last act to the bridge's hold (both device monotonic times)."""
    return (status["last_hold_ns"] - status["last_command_ns"]) / 1e9


def holding(t, hold_at: float) -> dict:
    """Where the vehicle went after the hold (horizontal): how far from where the hold began at most, and how far
    it moved over the last second of the six watched (ArduCopter's BRAKE stops there; PX4's Hold flies back to the
    point where it began holding)."""
    track = [(w, pose.position_ned[:2]) for w, pose in list(t.poses) if w >= hold_at]
    start = track[0][1]
    last_s = [p for w, p in track if w >= track[-1][0] - 1.0]
    return {
        "farthest_from_hold_m": round(max(float(np.linalg.norm(p - start)) for _, p in track), 2),
        "moved_last_second_m": round(float(np.linalg.norm(last_s[-1] - last_s[0])), 2),
        "from_hold_point_at_6s_m": round(float(np.linalg.norm(track[-1][1] - start)), 2),
    }


def bridge_endpoint(log: Path) -> str | None:
    """The local bridge's endpoint, from hil.run's run log."""
    if not log.exists():
        return None
    started = [json.loads(x) for x in log.read_text().splitlines() if '"bridge_started"' in x]
    return started[0]["endpoint"] if started else None


def wait_for_episode(proc: subprocess.Popen, log: Path, episode: int, timeout_s: float = 300) -> str:
    """Wait until hil.run has opened its ``episode``-th episode (the bridge's status counts the resets); the
    bridge's endpoint."""
    deadline = time.monotonic() + timeout_s
    endpoint, probe = None, None
    try:
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                finish(proc, 10)
                raise RuntimeError(f"hil.run ended before its episode {episode}")
            if probe is None:
                endpoint = bridge_endpoint(log)
                probe = BridgeClient(endpoint) if endpoint else None
            if probe is not None and probe.status().counters["resets"] >= episode:
                return str(endpoint)
            time.sleep(0.05)
    finally:
        if probe is not None:
            probe.close()


def link_cut_phase(autopilot: str, out: Path, cut_s: float = 6.0) -> dict:
    port = LINKS[autopilot].fc_port
    proc = hil_run(autopilot, out, episodes=3, seed=100)
    log = out / "run.jsonl"
    # the cut starts half a second into the second episode, so the host is acting all through it
    wait_for_episode(proc, log, 2)
    time.sleep(0.5)
    rules = (
        "table inet airq_cut {\n chain out {\n  type filter hook output priority 0;\n"
        f"  udp dport {port} drop\n  udp sport {port} drop\n }}\n}}\n"
    )
    try:
        subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)
        cut_at = time.monotonic()
        time.sleep(cut_s)
        subprocess.run(["nft", "delete", "table", "inet", "airq_cut"], check=True)
        restored_at = time.monotonic()
        finish(proc, 300)
    finally:
        if proc.poll() is None:
            proc.kill()
    report = json.loads((out / "report.json").read_text())
    events = [json.loads(line) for line in log.read_text().splitlines() if '"event"' in line]
    lost = [e for e in events if e.get("event") == "vehicle_link_lost"]
    rel = report["runs"][0]["reliability"]
    return {
        "cut_s": cut_s,
        "vehicle_link_errors": rel["vehicle_link_errors"],
        "first_refusal_after_cut_s": round(lost[0]["t_mono"] - cut_at, 2) if lost else None,
        "refusal_detail": lost[0].get("detail") if lost else None,
        "episodes_after": len(report["runs"][0]["episodes"]),
        "outcomes": [e["outcome"] for e in report["runs"][0]["episodes"]],
        "restored_after_s": round(restored_at - cut_at, 2),
    }


def signing_timestamp() -> int:
    """MAVLink 2 signing's clock: 10 us units since 2015-01-01 00:00 UTC."""
    return int((time.time() - 1420070400) * 1e5)


def setup_signing(telemetry: str, key: bytes) -> dict:
    """Give ArduCopter the key over its unsigned first channel (SETUP_SIGNING, as a ground station does), then see
    that what it sends there is signed."""
    from pymavlink import mavutil

    speak_mavlink2(mavutil)  # SETUP_SIGNING is a MAVLink 2 message
    gcs = mavutil.mavlink_connection(telemetry, source_system=255, source_component=190)
    try:
        hb = gcs.wait_heartbeat(timeout=60)
        if hb is None:
            raise RuntimeError(f"no heartbeat from ArduCopter on {telemetry}")
        gcs.mav.setup_signing_send(gcs.target_system, gcs.target_component, key, signing_timestamp())
        deadline, signed, seen = time.monotonic() + 10, 0, 0
        while time.monotonic() < deadline and signed < 5:
            m = gcs.recv_match(type="HEARTBEAT", blocking=True, timeout=1)
            if m is not None and m.get_srcComponent() == 1:
                seen += 1
                buf = m.get_msgbuf()  # MAVLink 2's incompat flag 0x01: a signature follows (this link has no key)
                signed += buf[0] == 0xFD and bool(buf[2] & 0x01)
        if not signed:
            raise RuntimeError(f"ArduCopter's heartbeats stayed unsigned after SETUP_SIGNING ({seen} seen)")
        return {"signed_heartbeats_after_setup": signed}
    finally:
        gcs.close()


def refused_without_key(fc: str, key_file: Path | None) -> dict:
    """A bridge without the key (or with another key) asks for GUIDED: what ArduCopter answers, and what the
    bridge's link counted."""
    args = ["--actuator", "mavlink", "--fc", fc, "--policy", str(POLICY)]
    if key_file is not None:
        args += ["--fc-signing-key", str(key_file)]
    bridge = BridgeProcess(args).start()
    client = BridgeClient(bridge.endpoint)
    try:
        time.sleep(3.0)  # the link hears (or drops) a few heartbeats
        try:
            answer = client.vehicle("mode", mode="GUIDED", timeout_s=8.0)
            answered = f"accepted: {answer}"
        except Exception as e:  # noqa: BLE001 - the refusal is what is measured
            answered = f"{type(e).__name__}: {e}"
        status = client.status().actuator
    finally:
        client.close()
        bridge.close()
    return {
        "answer": answered,
        "mode": status.get("mode"),
        "link_ok": status.get("link_ok"),
        **{k: status.get(k) for k in ("unsigned_rejected", "bad_signatures", "foreign_messages")},
    }


def signed_phase(out: Path, episodes: int) -> dict:
    """ArduCopter with MAVLink 2 signing: the key set up over its first channel; a bridge without the key and one
    with another key are not obeyed; the bridge with the key flies the episodes and drops nothing of ArduCopter's."""
    links = SIGNED_LINKS["ardupilot"]
    key = os.urandom(32)
    key_file, wrong_file = out / "fc.key", out / "wrong.key"
    for path, secret in ((key_file, key), (wrong_file, os.urandom(32))):
        path.write_text(secret.hex() + "\n")
        path.chmod(0o600)  # the bridge refuses a key file others can read
    seen: dict = {"setup": setup_signing(links.telemetry, key)}
    seen["unsigned_bridge"] = refused_without_key(links.fc, None)
    seen["wrong_key_bridge"] = refused_without_key(links.fc, wrong_file)
    seen["episodes"] = episodes_phase(
        "ardupilot", out / "episodes", episodes, links, ("--fc-signing-key", str(key_file))
    )
    report = json.loads((out / "episodes" / "report.json").read_text())
    actuator = report["vehicle"]["bridge_actuator"]
    seen["signed_bridge"] = {k: actuator.get(k) for k in ("signed", "unsigned_rejected", "bad_signatures")}
    return seen


class Relay:
    """A UDP relay between the autopilot and the bridge that delays each datagram by a uniform 0..``jitter_s``
    (so they also arrive out of order): it listens where the autopilot sends (``port``), forwards to the bridge on
    ``port + 1``, and sends the bridge's datagrams back to where the autopilot's came from."""

    def __init__(self, port: int, jitter_s: float, seed: int = 0) -> None:
        import heapq
        import random
        import socket
        import threading

        self._heapq, self._rng, self.jitter_s = heapq, random.Random(seed), jitter_s
        self.autopilot_side = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.autopilot_side.bind(("127.0.0.1", port))
        self.bridge_side = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.bridge_side.bind(("127.0.0.1", 0))
        self.bridge = ("127.0.0.1", port + 1)
        self.autopilot: tuple[str, int] | None = None
        self.queue: list[tuple[float, int, object, bytes, tuple[str, int]]] = []
        self.lock = threading.Lock()
        self.forwarded = {"to_bridge": 0, "to_autopilot": 0}
        self._stop = threading.Event()
        self._n = 0
        self.threads = [threading.Thread(target=self._receive, args=(sock,), daemon=True)
                        for sock in (self.autopilot_side, self.bridge_side)]  # fmt: skip
        self.threads.append(threading.Thread(target=self._send, daemon=True))
        for t in self.threads:
            t.start()

    def _receive(self, sock) -> None:
        sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                data, addr = sock.recvfrom(65535)
            except OSError:
                continue
            if sock is self.autopilot_side:
                self.autopilot = addr
                out, to, key = self.bridge_side, self.bridge, "to_bridge"
            elif self.autopilot is not None:
                out, to, key = self.autopilot_side, self.autopilot, "to_autopilot"
            else:
                continue
            with self.lock:
                self._n += 1
                self._heapq.heappush(self.queue, (time.monotonic() + self._rng.uniform(0, self.jitter_s), self._n,
                                                  out, data, to))  # fmt: skip
                self.forwarded[key] += 1

    def _send(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            with self.lock:
                due = []
                while self.queue and self.queue[0][0] <= now:
                    due.append(self._heapq.heappop(self.queue))
            for _, _, sock, data, to in due:
                try:
                    sock.sendto(data, to)
                except OSError:
                    pass
            time.sleep(0.002)

    def close(self) -> None:
        self._stop.set()
        for t in self.threads:
            t.join(1)
        self.autopilot_side.close()
        self.bridge_side.close()


class Sitl:
    """The SITL process, which the faults phase kills and starts again in the same working directory (its
    parameters and, on ArduCopter, its EEPROM stay: a reboot, not a new vehicle)."""

    def __init__(self, autopilot: str, binary: str, params: str | None, work: Path, speedup: float,
                 signed: bool = False) -> None:  # fmt: skip
        self.args = (autopilot, binary, params, work, speedup)
        self.signed = signed
        self.proc = start_sitl(*self.args, signed=signed)

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL: a crash, nothing flushed
        self.proc.wait()

    def start(self) -> None:
        self.proc = start_sitl(*self.args, signed=self.signed)

    def stop(self) -> None:
        stop_sitl(self.proc)


def run_log(out: Path) -> tuple[list[dict], int]:
    """run.jsonl's records and how many of its lines do not parse (must be none)."""
    records, bad = [], 0
    for line in (out / "run.jsonl").read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            bad += 1
    return records, bad


def run_summary(out: Path, episodes: int) -> dict:
    report = json.loads((out / "report.json").read_text())
    run = report["runs"][0]
    records, bad = run_log(out)
    return {
        "outcomes": [e["outcome"] for e in run["episodes"]],
        "episodes_recorded": len(run["episodes"]),
        "episodes_asked": episodes,
        "vehicle_link_errors": run["reliability"]["vehicle_link_errors"],
        "pilot_acts": run["reliability"]["pilot_acts"],
        "deadline_misses": run["deadline_misses"],
        "acts": run["acts"],
        "actuation_hz": round(run["actuation_hz"], 2),
        "events": sorted({r["event"] for r in records if "event" in r}),
        "run_log_lines": len(records),
        "run_log_bad_lines": bad,
        "bridge_actuator": {
            k: report["vehicle"]["bridge_actuator"].get(k)
            for k in (
                "setpoints_sent",
                "setpoints_withheld",
                "holds",
                "reboots",
                "rebooted",
                "mode",
                "armed",
                "link_ok",
            )
        },  # fmt: skip
    }


def lossy_fault(autopilot: str, out: Path, loss_pct: int = 20, jitter_s: float = 0.2, episodes: int = 3) -> dict:
    """The bridge-autopilot link loses ``loss_pct`` % of its datagrams each way (nftables) and delays each by up to
    ``jitter_s`` (a relay): hil.run flies on."""
    port = LINKS[autopilot].fc_port
    relay = Relay(port, jitter_s)
    rules = (
        "table inet airq_loss {\n chain out {\n  type filter hook output priority 0;\n"
        f"  udp dport {port} numgen random mod 100 < {loss_pct} drop\n"
        f"  udp sport {port} numgen random mod 100 < {loss_pct} drop\n }}\n}}\n"
    )
    links = SitlLinks(f"udpin:127.0.0.1:{port + 1}", LINKS[autopilot].telemetry, port)
    subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)
    try:
        finish(hil_run(autopilot, out, episodes, seed=300, links=links), timeout=600)
    finally:
        subprocess.run(["nft", "delete", "table", "inet", "airq_loss"], check=False)
        relay.close()
    return {"loss_pct": loss_pct, "jitter_s": jitter_s, "relay": relay.forwarded, **run_summary(out, episodes)}


def restart_fault(autopilot: str, sitl: Sitl, out: Path, episodes: int = 3, down_s: float = 2.0) -> dict:
    """The autopilot process killed (SIGKILL) in flight and started again ``down_s`` later, twice:

    1. under ``hil.run``: the host's telemetry stops, hil.run ends with its one-line error and exit 1, run.jsonl
       keeps the finished episodes, and ``hil.run --resume`` (after the restart) arms, takes off and flies the rest;
    2. under a bridge that keeps running (a host acting at 10 Hz on the last observation): acts are refused
       VEHICLE_LINK once the heartbeat is 3 s old, then, the autopilot back, because it rebooted, until the host arms
       the vehicle again through the bridge's ``vehicle`` requests; then its setpoints go out again."""
    proc = hil_run(autopilot, out, episodes, seed=200)
    try:
        wait_for_episode(proc, out / "run.jsonl", 2)
        time.sleep(1.0)
        sitl.kill()
        killed_at = time.monotonic()
        time.sleep(down_s)
        sitl.start()
        _, stderr = proc.communicate(timeout=120)
        ended_at = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
    records, bad = run_log(out)
    seen: dict = {
        "hil_run_exit": proc.returncode,
        "hil_run_error": next((x for x in stderr.splitlines() if x.startswith("error:")), None),
        "hil_run_ended_after_kill_s": round(ended_at - killed_at, 2),
        "episodes_kept": sum(r.get("kind") == "episode" for r in records),
        "run_log_bad_lines": bad,
    }
    resumed = subprocess.run([sys.executable, "-m", "hil.run", "--resume", str(out), "--quiet"], cwd=REPO,
                             capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
    seen["resume_exit"] = resumed.returncode
    seen["resumed"] = run_summary(out, episodes) if resumed.returncode == 0 else resumed.stderr.strip()[-500:]
    seen["bridge"] = bridge_through_restart(autopilot, sitl, down_s)
    return seen


def start_flight(autopilot: str, seed: int) -> tuple[BridgeProcess, AutopilotNavEnv, BridgeClient, np.ndarray]:
    """A bridge of its own on the autopilot's link and a host flying 10 steps of episode ``seed`` (take-off first
    if needed): the bridge process, the host's env and client, and the last observation; the caller closes them."""
    fc, telemetry = LINKS[autopilot].fc, LINKS[autopilot].telemetry
    bridge = BridgeProcess(["--actuator", "mavlink", "--fc", fc, "--policy", str(POLICY)]).start()
    env = AutopilotNavEnv(level="easy", telemetry=telemetry)
    client = BridgeClient(bridge.endpoint)
    try:
        prepare_vehicle(client, env, 5.0, 180.0)
        obs, _ = env.reset(seed=seed)
        for _ in range(10):
            obs, *_ = env.step(client.act(obs).action)
    except BaseException:
        client.close()
        env.close()
        bridge.close()
        raise
    return bridge, env, client, obs


def bridge_through_restart(autopilot: str, sitl: Sitl, down_s: float) -> dict:
    """A running bridge while the autopilot process is killed and started again (restart_fault's second part)."""
    telemetry = LINKS[autopilot].telemetry
    bridge, env, client, obs = start_flight(autopilot, seed=220)
    seen: dict = {}
    try:
        env.close()  # its link dies with the autopilot (ArduCopter's TCP); the host acts on the last observation
        status = client.status().actuator
        sent_before, hold_sent_before = status["setpoints_sent"], status["hold_setpoints_sent"]
        sitl.kill()
        killed_at = time.monotonic()
        restarted_at = None
        refusals: list[tuple[float, str]] = []
        while time.monotonic() < killed_at + 90:
            now = time.monotonic()
            if restarted_at is None and now >= killed_at + down_s:
                sitl.start()
                restarted_at = time.monotonic()
            try:
                client.act(obs)
                if "armed_again_s" in seen:
                    break  # accepted again once the host armed the vehicle again (below)
                if not refusals:
                    seen["acts_accepted_before_link_lost"] = seen.get("acts_accepted_before_link_lost", 0) + 1
            except BridgeRefused as e:
                kind = "rebooted" if "rebooted" in e.detail else "link lost" if "link lost" in e.detail else e.detail
                if not refusals or refusals[-1][1] != kind:
                    refusals.append((round(now - killed_at, 2), kind))
                if kind == "rebooted" and "armed_again_s" not in seen:
                    status = client.status().actuator
                    seen["sent_while_refused"] = status["setpoints_sent"] - sent_before
                    seen["hold_setpoints_while_refused"] = status["hold_setpoints_sent"] - hold_sent_before
                    status = client.status().actuator
                    seen["after_reboot"] = {k: status.get(k) for k in ("reboots", "rebooted", "armed", "mode")}
                    # the host arms again: the vehicle is on the ground, disarmed, in its boot mode
                    env = AutopilotNavEnv(level="easy", telemetry=telemetry)
                    preflight = prepare_vehicle(client, env, 5.0, 180.0)
                    seen["armed_again_s"] = round(time.monotonic() - killed_at, 2)
                    seen["preflight_again"] = preflight.to_json()
                    obs, _ = env.reset(seed=221)
            time.sleep(0.1)
        seen["refusals"] = refusals  # (seconds after the kill, why) for each change of reason
        seen["restarted_after_kill_s"] = None if restarted_at is None else round(restarted_at - killed_at, 2)
        result = client.act(obs)
        seen["act_after_rearm"] = {
            "control": (result.vehicle or {}).get("control"),
            "mode": (result.vehicle or {}).get("mode"),
        }
    finally:
        client.close()
        env.close()
        bridge.close()
    return seen


def set_gps(autopilot: str, on: bool) -> str:
    """The autopilot's own simulated GPS switched off or on, from a second ground-station link: ArduCopter SITL's
    SIM_GPS1_ENABLE (4.7 and later) or SIM_GPS_DISABLE (4.6 and earlier), whichever the build answers (SERIAL2, TCP
    5763); PX4 SITL's sensor_gps_sim SIM_GPS_USED (satellites; under 4, no fix), sent to its payload MAVLink instance
    (UDP 14280), so the host's link keeps its partner."""
    import socket
    import struct

    from pymavlink import mavutil

    if autopilot == "ardupilot":
        link = mavutil.mavlink_connection("tcp:127.0.0.1:5763", source_system=254, source_component=190)
        link.wait_heartbeat(timeout=10)
        kind = mavutil.mavlink.MAV_PARAM_TYPE_REAL32
        candidates = [("SIM_GPS1_ENABLE", float(on)), ("SIM_GPS_DISABLE", float(not on))]
    else:
        link = mavutil.mavlink_connection("udpout:127.0.0.1:14280", source_system=254, source_component=190)
        # that instance answers its configured remote port 14030 or the first partner it heard, never a later one:
        # every switch speaks from 14030 (PX4 v1.16.0 left the second switch unanswered from a new port)
        link.port.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        link.port.bind(("127.0.0.1", 14030))
        link.mav.heartbeat_send(mavutil.mavlink.MAV_TYPE_GCS, mavutil.mavlink.MAV_AUTOPILOT_INVALID, 0, 0, 0)
        satellites = 10 if on else 0
        kind = mavutil.mavlink.MAV_PARAM_TYPE_INT32
        candidates = [("SIM_GPS_USED", struct.unpack("<f", struct.pack("<i", satellites))[0])]  # integers bytewise
    try:
        for name, value in candidates:  # an autopilot answers a parameter it has with its PARAM_VALUE
            for _ in range(5):
                if autopilot == "px4":  # its MAVLink instance answers a partner it hears (a lost heartbeat: again)
                    link.mav.heartbeat_send(
                        mavutil.mavlink.MAV_TYPE_GCS, mavutil.mavlink.MAV_AUTOPILOT_INVALID, 0, 0, 0
                    )
                link.mav.param_set_send(1, 1, name.encode(), value, kind)
                ack = link.recv_match(type="PARAM_VALUE", blocking=True, timeout=2)
                if ack is not None and ack.param_id == name and ack.param_value == value:  # not an older echo
                    return f"{name} set ({'on' if on else 'off'})"
        return f"{', '.join(n for n, _ in candidates)}: no PARAM_VALUE came back"
    finally:
        link.close()


def gps_fault(autopilot: str, out: Path, episodes: int = 3, watch_s: float = 30.0) -> dict:
    """GPS lost in flight, twice:

    1. under a bridge that keeps running (a host acting at 10 Hz on the last observation): the autopilot's own
       failsafe takes the vehicle (a mode the bridge did not set): acts are answered ``control: pilot`` and nothing is
       sent; GPS comes back afterwards;
    2. under ``hil.run``: where the autopilot stops sending a position (ArduCopter), hil.run ends with its one-line
       error (the position estimate lost, the link alive) and exit 1; where it keeps estimating one (PX4), hil.run
       flies on; run.jsonl keeps the finished episodes either way."""
    bridge, env, client, obs = start_flight(autopilot, seed=410)
    seen: dict = {}
    try:
        seen["injected"] = set_gps(autopilot, on=False)
        at = time.monotonic()
        replies: list[tuple[float, str | None, str | None]] = []  # (s after the loss, mode, control) on change
        pilot_acts = sent_while_pilot = 0
        sent = client.status().actuator["setpoints_sent"]
        while time.monotonic() < at + watch_s:
            try:
                v = client.act(obs).vehicle or {}
                now = (v.get("mode"), v.get("control"))
            except BridgeRefused as e:
                now = (None, f"refused: {e.code.name}")
            after = client.status().actuator["setpoints_sent"]
            if now[1] == "pilot":  # what went out around an act answered "pilot" (nothing may)
                pilot_acts += 1
                sent_while_pilot += after - sent
            sent = after
            if not replies or replies[-1][1:] != now:
                replies.append((round(time.monotonic() - at, 2), *now))
            time.sleep(0.1)
        status = client.status().actuator
        seen["bridge"] = {
            "replies": replies,
            "pilot_acts": pilot_acts,
            "setpoints_sent_while_pilot": sent_while_pilot,
            "setpoints_withheld": status["setpoints_withheld"],
        }
        seen["restored"] = set_gps(autopilot, on=True)
    finally:
        client.close()
        env.close()
        bridge.close()
    if not seen["restored"].endswith("set (on)"):  # hil.run's take-off needs the GPS back
        raise RuntimeError(f"the GPS was not switched back on: {seen['restored']}")
    proc = hil_run(autopilot, out, episodes, seed=400)
    try:
        wait_for_episode(proc, out / "run.jsonl", 2, timeout_s=600)
        time.sleep(1.0)
        set_gps(autopilot, on=False)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        set_gps(autopilot, on=True)
    records, bad = run_log(out)
    seen["hil_run"] = {
        "exit": proc.returncode,
        "error": next((x for x in stderr.splitlines() if x.startswith("error:")), None),
        "episodes_kept": sum(r.get("kind") == "episode" for r in records),
        "run_log_bad_lines": bad,
    }
    return seen


FAULTS = ("lossy", "restart", "gps")  # in this order: GPS stays lost until the autopilot restarts


def faults_phase(autopilot: str, sitl: Sitl, out: Path, which: tuple[str, ...] = FAULTS) -> dict:
    seen: dict = {}
    for name, fault in (("lossy", lambda: lossy_fault(autopilot, out / "lossy")),
                        ("restart", lambda: restart_fault(autopilot, sitl, out / "restart")),
                        ("gps", lambda: gps_fault(autopilot, out / "gps"))):  # fmt: skip
        if name not in which:
            continue
        try:
            seen[name] = fault()
        except Exception as e:  # noqa: BLE001 - what the others measured is still reported
            seen[name] = {"error": f"{type(e).__name__}: {e}"}
    return seen


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--autopilot", choices=("ardupilot", "px4"), required=True)
    p.add_argument("--binary", required=True)
    p.add_argument("--params", help="ArduCopter: Tools/autotest/default_params/copter.parm")
    p.add_argument("--episodes", type=int, default=3)
    p.add_argument("--speedup", type=float, default=1.0)
    p.add_argument("--out", required=True)
    p.add_argument("--faults", default=",".join(FAULTS), help="the faults phase's faults")
    p.add_argument("--phases", default="episodes,failsafe,cut", help="also faults; or signed (ArduCopter: alone)")
    a = p.parse_args()
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"airq-{a.autopilot}-"))
    phases = a.phases.split(",")
    signed = "signed" in phases
    if signed and (phases != ["signed"] or a.autopilot != "ardupilot"):
        p.error("--phases signed runs alone, on ArduCopter")
    sitl = Sitl(a.autopilot, a.binary, a.params, work, a.speedup, signed=signed)
    seen: dict = {"autopilot": a.autopilot}
    try:
        if "faults" in phases:
            seen["faults"] = faults_phase(a.autopilot, sitl, out, tuple(a.faults.split(",")))
        if signed:
            seen["signed"] = signed_phase(out, a.episodes)
        if "episodes" in phases:
            seen["episodes"] = episodes_phase(a.autopilot, out / "episodes", a.episodes)
        if "failsafe" in phases:
            seen["failsafe"] = failsafe_phase(a.autopilot)
        if "cut" in phases:
            seen["cut"] = link_cut_phase(a.autopilot, out / "cut")
    except Exception as e:  # what was measured before it is still printed
        seen["error"] = f"{type(e).__name__}: {e}"
    finally:
        sitl.stop()
        shutil.copy(work / "sitl.log", out / "sitl.log")
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(seen))
    return 1 if "error" in seen else 0


if __name__ == "__main__":
    sys.exit(main())
