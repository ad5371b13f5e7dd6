"""One MAVLink link to an ArduPilot or PX4 autopilot, for the bridge's actuator and the host's ground station alike.

The endpoint grammar (docs/autopilot.md, "MAVLink endpoints", lists the same forms): ``serial:DEVICE:BAUD``,
``udpin:HOST:PORT``, ``udp:HOST:PORT`` (pymavlink's name for udpin), ``udpout:HOST:PORT``, ``tcp:HOST:PORT`` and
``tcpin:HOST:PORT``; HOST a name or an IPv4 address (pymavlink's UDP and TCP links split HOST:PORT at its one
colon), PORT within 1..65535, BAUD a positive whole number. :func:`parse_endpoint` is the one parser: the bridge's
``--fc`` and the host's ``--telemetry`` are checked by it, and :class:`MavlinkLink` opens what it returns.

:class:`MavlinkLink` is the link's common part: it opens the endpoint as a companion computer (system 1,
MAV_COMP_ID_ONBOARD_COMPUTER) or a ground station (system 255, MAV_COMP_ID_MISSIONPLANNER), sends that role's
HEARTBEAT once a second from a reader thread, follows the autopilot's HEARTBEAT (which autopilot, its system and
component, MAV_TYPE, mode, armed), asks for AUTOPILOT_VERSION once the autopilot is heard, keeps its COMMAND_ACKs and
STATUSTEXTs, and writes to it one sender at a time (COMMAND_LONG included). Everything else a message means belongs
to the link's owner: ``on_message`` sees every message but the heartbeats of ground stations and companions,
``on_tick`` runs once per reader turn (at least every 50 ms).

What the link trusts (a shared radio, a second ground station, a noisy UART; docs/autopilot.md, "Faults"):

* **One autopilot.** The first autopilot heartbeat locks the link to its system and component; every other
  system's or component's messages are dropped and counted (``foreign_messages``). On UDP the link also locks to
  the address that heartbeat came from: datagrams from any other address are dropped unread (``foreign_datagrams``)
  until that address has sent nothing at all for ``link_timeout_s``, and on ``udpin`` everything the link sends goes
  to that address alone (pymavlink's own UDP server writes to every address that ever sent it a datagram). Then
  the same system may come back from a new address (a restarted SITL binds a new port); a flood that only costs the
  autopilot some heartbeats, while its other messages still arrive, does not open the lock.
* **Its boot clock.** The link asks for SYSTEM_TIME once a second when it locks and after every heartbeat gap
  (``BOOT_CLOCK_GAP_S``: a reboot forgets the streams asked for), and watches ``time_boot_ms`` in every message of the autopilot's component: a clock that goes back by more than
  ``REBOOT_BACKSTEP_MS``, or an autopilot that comes back disarmed from a lost link it went into armed, is a reboot
  (``reboots``, ``rebooted``: the owner decides what a reboot forbids, and clears ``rebooted``).
* **Signatures, with a key** (``signing_key``; :func:`load_signing_key` reads a key file): MAVLink 2 signing as
  the MAVLink spec defines it (pymavlink's): every message the link sends is signed, and every message that is
  unsigned, MAVLink 1, wrongly signed or replayed (its timestamp not newer than the last of its stream) is dropped
  before the link reads it, counted in ``unsigned_rejected`` and ``bad_signatures``. The hash is checked before a
  stream's timestamp is kept (pymavlink keeps it first, so one forged frame with a far-future timestamp would
  silence the real autopilot's stream, and forged streams would fill its table).
* **Only answers it asked for.** AUTOPILOT_VERSION counts only as the answer to :meth:`request_version` (asked at
  the lock and after every reboot).

This module imports only the standard library; pymavlink (the ``mavlink`` extra) is imported when a link opens, so
checking an endpoint needs nothing installed.
"""

from __future__ import annotations

import hashlib
import os
import select
import stat
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ENDPOINT_FORMS = (
    "serial:DEVICE:BAUD, udpin:HOST:PORT, udp:HOST:PORT, udpout:HOST:PORT, tcp:HOST:PORT or tcpin:HOST:PORT"
)
NETWORK_KINDS = ("udpin", "udp", "udpout", "tcp", "tcpin")
AUTOPILOT_NAMES = {3: "ardupilot", 12: "px4"}  # MAV_AUTOPILOT_ARDUPILOTMEGA, MAV_AUTOPILOT_PX4
HEARTBEAT_PERIOD_S = 1.0
# a boot clock stepping back by more than this is a reboot; messages of one component arrive a few ms out of order
REBOOT_BACKSTEP_MS = 1000
BOOT_CLOCK_INTERVAL_US = 1_000_000  # SYSTEM_TIME, asked for at every lock
# a heartbeat gap this long (one heartbeat missed) may hide a reboot, which forgets the streams asked for: ask again
BOOT_CLOCK_GAP_S = 1.5 * HEARTBEAT_PERIOD_S
UDP_MAX_DATAGRAM = 65535
SIGNED_STREAM_MAX_AGE = 6_000_000  # a new signed stream may start at most one minute (10 us units) behind us
# role -> (source system, source component, our HEARTBEAT's MAV_TYPE and system status)
ROLES = {
    "companion": (1, 191, "MAV_TYPE_ONBOARD_CONTROLLER", "MAV_STATE_ACTIVE"),  # MAV_COMP_ID_ONBOARD_COMPUTER
    "gcs": (255, 190, "MAV_TYPE_GCS", None),  # MAV_COMP_ID_MISSIONPLANNER; system status 0 (uninitialised)
}


@dataclass(frozen=True)
class Endpoint:
    """A checked endpoint: ``device`` and ``baud`` are what pymavlink's ``mavlink_connection`` opens."""

    spec: str  # as given
    kind: str  # serial, udpin, udp, udpout, tcp or tcpin
    device: str  # the serial device, or the spec itself (pymavlink reads the kind from its prefix)
    baud: int | None = None  # serial only
    host: str | None = None  # the network kinds only
    port: int | None = None


def parse_endpoint(spec: str) -> Endpoint:
    """``spec`` parsed by the endpoint grammar (module docstring); ValueError, one line naming what is wrong and
    quoting ``spec``, for anything else."""
    if not isinstance(spec, str) or not spec or any(c.isspace() for c in spec):
        raise ValueError(f"a MAVLink endpoint is {ENDPOINT_FORMS} without spaces, got {spec!r}")
    kind, sep, rest = spec.partition(":")
    if not sep:
        raise ValueError(f"a MAVLink endpoint is {ENDPOINT_FORMS}, got {spec!r}")
    if kind == "serial":
        device, sep, baud = rest.rpartition(":")
        if not sep or not device:
            raise ValueError(f"serial needs DEVICE:BAUD (e.g. serial:/dev/serial0:921600), got {spec!r}")
        if not (baud.isascii() and baud.isdigit() and int(baud) > 0):
            raise ValueError(f"serial BAUD must be a positive whole number, got {baud!r} in {spec!r}")
        return Endpoint(spec, kind, device, baud=int(baud))
    if kind not in NETWORK_KINDS:
        raise ValueError(f"unknown MAVLink link kind {kind!r} in {spec!r}: the forms are {ENDPOINT_FORMS}")
    host, sep, port = rest.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{kind} needs HOST:PORT (e.g. {kind}:127.0.0.1:14550), got {spec!r}")
    if ":" in host:
        raise ValueError(f"{kind} HOST must be a name or an IPv4 address (pymavlink takes no IPv6), got {spec!r}")
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(f"{kind} PORT must be a number within 1..65535, got {port!r} in {spec!r}")
    return Endpoint(spec, kind, spec, host=host, port=int(port))


@dataclass
class AutopilotState:
    """What a link has heard of the autopilot (None or False until heard)."""

    autopilot: str | None = None  # "ardupilot" or "px4", from its HEARTBEAT
    system: int | None = None
    component: int | None = None
    mav_type: str | None = None  # MAV_TYPE without its prefix, e.g. QUADROTOR
    mode: str | None = None  # pymavlink's name
    armed: bool = False
    last_heartbeat_s: float | None = None  # the link's clock
    firmware: str | None = None  # AUTOPILOT_VERSION's flight_sw_version, major.minor.patch
    firmware_git: str | None = None  # ArduPilot: the git hash's first 8 characters; PX4: its first 8 bytes in hex
    foreign_messages: int = 0  # messages from another system or component than the autopilot's, ignored
    foreign_datagrams: int = 0  # UDP: datagrams from another address than the autopilot's while it is heard, unread
    boot_ms: int | None = None  # the autopilot's boot clock (time_boot_ms), as last seen
    reboots: int = 0  # reboots noticed (:attr:`rebooted` says why)
    rebooted: str | None = None  # why the link believes the autopilot rebooted; the link's owner clears it
    unsigned_rejected: int = 0  # with a signing key: unsigned (or MAVLink 1) messages dropped
    bad_signatures: int = 0  # with a signing key: wrongly signed or replayed messages dropped


def add_statustext(lines: deque[str], msg: Any) -> None:
    """A STATUSTEXT into ``lines``; a long text comes in 50-character chunks sharing an ``id`` (MAVLink 2),
    joined back into one line."""
    text = str(msg.text).strip()
    if getattr(msg, "id", 0) and getattr(msg, "chunk_seq", 0) and lines:
        lines[-1] += text
    elif text:
        lines.append(text)


def load_signing_key(path: str | os.PathLike[str]) -> bytes:
    """The 32-byte MAVLink 2 signing key in the file at ``path``: 64 hexadecimal digits, or a passphrase whose
    SHA-256 is the key (MAVProxy's ``signing setup PASSPHRASE``, so the same passphrase sets up the autopilot).
    ValueError, one line, for a missing, empty or unreadable file, or one that others may read (the key lets anyone
    command the vehicle: ``chmod 600``)."""
    try:
        mode = os.stat(path).st_mode
        text = open(path, encoding="utf-8").read().strip()  # noqa: SIM115 - read whole at once
    except FileNotFoundError:
        raise ValueError(f"signing key file {path} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"signing key file {path} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(f"signing key file {path} is open to other users (mode {mode & 0o777:o}): chmod 600 it")
    if not text:
        raise ValueError(f"signing key file {path} is empty: write 64 hex digits or a passphrase in it")
    if len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text):
        return bytes.fromhex(text)
    return hashlib.sha256(text.encode()).digest()


def speak_mavlink2(mavutil: Any) -> None:
    """Make pymavlink's links speak MAVLink 2 from their first byte, as signing needs (pymavlink otherwise starts in
    MAVLink 1 and switches, with a new encoder that forgets the signing set-up, when it hears MAVLink 2; the switch
    is process-wide, as the one pymavlink makes itself)."""
    if mavutil.mavlink.WIRE_PROTOCOL_VERSION != "2.0":
        os.environ["MAVLINK20"] = "1"
        mavutil.set_dialect(mavutil.current_dialect)


def load_mavutil() -> Any:
    """pymavlink's mavutil; ImportError naming the extra when it is missing."""
    try:
        # deferred: pymavlink: the mavlink extra
        from pymavlink import mavutil
    except ImportError as e:
        raise ImportError(f"a MAVLink link needs pymavlink: pip install 'airq[mavlink]' ({e})") from None
    return mavutil


class MavlinkLink:
    """The link to one autopilot (module docstring). Opened by the constructor (``connect`` stands in for
    pymavlink's ``mavlink_connection``); the reader thread runs from :meth:`start` to :meth:`close`. ``clock``
    stamps heartbeats and is the ``now`` the callbacks get."""

    def __init__(
        self,
        endpoint: str,
        role: str,
        *,
        on_message: Callable[[Any, float], None] | None = None,
        on_tick: Callable[[float], None] | None = None,
        link_timeout_s: float = 3.0,
        connect: Callable[..., Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        thread_name: str = "airq-mavlink",
        signing_key: bytes | None = None,
    ) -> None:
        parsed = parse_endpoint(endpoint)
        if signing_key is not None and len(signing_key) != 32:
            raise ValueError(f"a MAVLink signing key is 32 bytes, got {len(signing_key)}")
        self.mavutil = load_mavutil()
        if signing_key is not None:
            speak_mavlink2(self.mavutil)
        self.mav = self.mavutil.mavlink
        system, component, mav_type, status = ROLES[role]
        self._heartbeat = (getattr(self.mav, mav_type), 0 if status is None else getattr(self.mav, status))
        kwargs: dict[str, Any] = {"source_system": system, "source_component": component, "autoreconnect": True}
        if parsed.baud is not None:
            kwargs["baud"] = parsed.baud
        self.endpoint = endpoint
        self.conn = (connect or self.mavutil.mavlink_connection)(parsed.device, **kwargs)
        # a UDP link's datagrams are parsed one whole datagram at a time (_receive); a custom connect keeps the stream
        self._datagrams = connect is None and parsed.kind in ("udpin", "udp", "udpout")
        self.link_timeout_s = link_timeout_s
        self.clock = clock
        self.state = AutopilotState()
        self.acks: deque[tuple[int, int]] = deque(maxlen=32)  # (command, result)
        self.statustext: deque[str] = deque(maxlen=8)  # the autopilot's last messages
        self._on_message, self._on_tick = on_message, on_tick
        self._version_requested = False
        self._version_pending = False  # a request_version not answered yet
        self._address: tuple[str, int] | None = None  # UDP: where the autopilot's heartbeats come from
        self._source: tuple[str, int] | None = None  # UDP: the address of the datagram being handled
        self._address_heard_s = 0.0  # UDP: when the autopilot's address last sent anything (the link's clock)
        self._reboot_noticed_s: float | None = None
        self._signing_key = signing_key
        if signing_key is not None:
            self.conn.setup_signing(signing_key, sign_outgoing=True, allow_unsigned_callback=lambda mav, msg_id: False)
            self.conn.mav.check_signature = self._check_signature
        if self._datagrams and parsed.kind != "udpout":
            # pymavlink's UDP server writes to every address that ever sent it a datagram: ours writes to the
            # autopilot's alone (nothing before it is heard)
            self.conn.write = self._write_to_autopilot
        self._send_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    def start(self) -> MavlinkLink:
        self._thread.start()
        return self

    # ------------------------------------------------------------------ the reader
    def _run(self) -> None:
        next_heartbeat = 0.0
        mav_type, status = self._heartbeat
        while not self._stop.is_set():
            now = self.clock()
            if now >= next_heartbeat:
                self.send(lambda m: m.heartbeat_send(mav_type, self.mav.MAV_AUTOPILOT_INVALID, 0, 0, status))
                next_heartbeat = now + HEARTBEAT_PERIOD_S
            if self._on_tick is not None:
                self._on_tick(now)
            try:
                messages = self._receive(0.05)
            except (OSError, ValueError):  # a closed or broken link: the missing heartbeats say so
                messages = []
                time.sleep(0.05)
            for msg in messages:
                self._handle(msg, self.clock())
            self._count_signing()

    def _receive(self, timeout_s: float) -> list[Any]:
        """The messages that arrive within ``timeout_s``. Serial and TCP links are byte streams (pymavlink's
        ``recv_match``). A UDP datagram is parsed whole on a parser emptied first: a MAVLink frame never spans two
        datagrams, and a frame cut short at a datagram's end would otherwise take the next datagrams' bytes as its
        own (a 30-byte datagram whose header claims a 255-byte payload swallowed the next twelve heartbeats)."""
        if not self._datagrams:
            msg = self.conn.recv_match(blocking=True, timeout=timeout_s)
            return [] if msg is None else [msg]
        if not select.select([self.conn.port], [], [], timeout_s)[0]:
            return []
        try:  # the socket itself: pymavlink's recv would add every sender to the addresses its writes go to
            data, address = self.conn.port.recvfrom(UDP_MAX_DATAGRAM)
        except (BlockingIOError, ConnectionRefusedError):
            return []
        if not data:
            return []
        now = self.clock()
        if address == self._address:
            self._address_heard_s = now
        elif self._address is not None and now - self._address_heard_s < self.link_timeout_s:
            # another address, while the autopilot's is not silent: a flood that costs the autopilot a few
            # heartbeats does not make the link take a stranger's
            self.state.foreign_datagrams += 1
            return []
        self._source = address
        if self.conn.first_byte:
            self.conn.auto_mavlink_version(data)
        parser = self.conn.mav
        parser.buf, parser.buf_index, parser.expected_length = bytearray(), 0, self.mav.HEADER_LEN_V1 + 2
        messages = parser.parse_buffer(data) or []
        for msg in messages:
            self.conn.post_message(msg)  # mavutil's bookkeeping, as recv_match does
        return messages

    def _handle(self, msg: Any, now: float) -> None:
        kind, s = msg.get_type(), self.state
        if s.system is not None and (msg.get_srcSystem(), msg.get_srcComponent()) != (s.system, s.component):
            # the link serves the autopilot it heard first: a second autopilot, a ground station, another component
            # of the vehicle (a gimbal, a companion) or a stranger on a shared radio neither takes its place nor
            # reaches the callbacks
            s.foreign_messages += 1
            return
        boot_ms = getattr(msg, "time_boot_ms", None)
        if boot_ms is not None and s.component is not None:
            if s.boot_ms is not None and boot_ms < s.boot_ms - REBOOT_BACKSTEP_MS:
                self._rebooted(f"its boot clock went back from {s.boot_ms / 1000:.1f} s to {boot_ms / 1000:.1f} s")
            s.boot_ms = boot_ms
        if kind == "HEARTBEAT":
            autopilot = AUTOPILOT_NAMES.get(msg.autopilot)
            if autopilot is None or msg.type in (self.mav.MAV_TYPE_GCS, self.mav.MAV_TYPE_ONBOARD_CONTROLLER):
                return  # a ground station or a companion computer, not the vehicle
            gap = None if s.last_heartbeat_s is None else now - s.last_heartbeat_s
            came_back = gap is not None and gap >= self.link_timeout_s
            was_armed = s.armed
            s.autopilot, s.system, s.component = autopilot, msg.get_srcSystem(), msg.get_srcComponent()
            s.mode = self.mavutil.mode_string_v10(msg)
            s.armed = bool(msg.base_mode & self.mav.MAV_MODE_FLAG_SAFETY_ARMED)
            entry = self.mav.enums["MAV_TYPE"].get(msg.type)
            s.mav_type = entry.name.removeprefix("MAV_TYPE_") if entry is not None else str(msg.type)
            s.last_heartbeat_s = now
            if self._datagrams and self._source != self._address:
                self._address, self._address_heard_s = self._source, now
            self.conn.target_system, self.conn.target_component = s.system, s.component
            noticed = self._reboot_noticed_s is not None and gap is not None and self._reboot_noticed_s > now - gap
            if came_back and was_armed and not s.armed and not noticed:
                self._rebooted(f"it came back disarmed after {gap:.1f} s without a heartbeat, armed before")
            if gap is None or gap >= BOOT_CLOCK_GAP_S:
                self.ask_boot_clock()  # the first heartbeat, or one after a gap a quick reboot fits in
            if not self._version_requested:
                self._version_requested = True
                self.request_version()
        elif kind == "COMMAND_ACK":
            self.acks.append((msg.command, msg.result))
        elif kind == "AUTOPILOT_VERSION":
            if not self._version_pending:
                return  # unasked for: the version is the one the autopilot answered with
            self._version_pending = False
            v = int(msg.flight_sw_version)
            s.firmware = f"{v >> 24 & 0xFF}.{v >> 16 & 0xFF}.{v >> 8 & 0xFF}"
            git = bytes(msg.flight_custom_version)
            # PX4 sends the hash's first bytes least significant first
            s.firmware_git = (
                bytes(reversed(git)).hex() if s.autopilot == "px4" else git.rstrip(b"\0").decode("ascii", "replace")
            )
        elif kind == "STATUSTEXT":
            add_statustext(self.statustext, msg)
        if self._on_message is not None:
            self._on_message(msg, now)

    @property
    def signed(self) -> bool:
        """Whether the link signs and checks signatures (a key was given)."""
        return self._signing_key is not None

    def _check_signature(self, msgbuf: bytearray, src_system: int, src_component: int) -> bool:
        """A signed frame's signature (the MAVLink 2 signing spec): the hash first, then the stream's timestamp,
        which only a good signature may advance."""
        signing = self.conn.mav.signing
        assert self._signing_key is not None
        if hashlib.sha256(self._signing_key + bytes(msgbuf[:-6])).digest()[:6] != bytes(msgbuf[-6:]):
            return False
        low, high = struct.unpack("<IH", bytes(msgbuf[-12:-6]))
        timestamp, stream = low + (high << 32), (msgbuf[-13], src_system, src_component)
        last = signing.stream_timestamps.get(stream)
        if timestamp <= (last if last is not None else signing.timestamp - SIGNED_STREAM_MAX_AGE):
            return False  # replayed, or a new stream older than a minute
        signing.stream_timestamps[stream] = timestamp
        signing.timestamp = max(signing.timestamp, timestamp)
        return True

    def _count_signing(self) -> None:
        """pymavlink's signing counters into :attr:`state` (it counts a bad signature as rejected too)."""
        if self._signing_key is not None:
            signing = self.conn.mav.signing
            self.state.bad_signatures = signing.badsig_count
            self.state.unsigned_rejected = signing.reject_count - signing.badsig_count

    def _rebooted(self, why: str) -> None:
        s = self.state
        s.reboots += 1
        s.rebooted = why
        self._reboot_noticed_s = self.clock()
        s.boot_ms = None
        self.request_version()  # a reboot may bring new firmware

    # ------------------------------------------------------------------ what goes out
    def _write_to_autopilot(self, buf: bytes) -> None:
        """``udpin``'s writes: to the autopilot's address only, nothing before it is heard."""
        if self._address is not None:
            self.conn.port.sendto(buf, self._address)

    def send(self, write: Callable[[Any], Any]) -> None:
        """``write(encoder)`` with pymavlink's MAVLink encoder, one writer at a time; a down link drops it (the
        missing heartbeats report that)."""
        with self._send_lock:
            try:
                write(self.conn.mav)
            except OSError:
                pass

    def forget_acks(self, command: int) -> None:
        """Drop the kept COMMAND_ACKs of ``command``: an older answer is not the next request's."""
        for old in [a for a in list(self.acks) if a[0] == command]:
            self.acks.remove(old)

    def command(self, command: int, *params: float, confirmation: int = 0) -> None:
        """COMMAND_LONG ``command`` with up to seven params (the rest 0) to the autopilot heard last (system and
        component 1 before any); a first send (``confirmation`` 0) forgets the command's older acks, a resend
        (MAVLink's command protocol counts them in ``confirmation``) keeps them."""
        if confirmation == 0:
            self.forget_acks(command)
        p = [*params, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0][:7]
        s = self.state
        self.send(lambda m: m.command_long_send(s.system or 1, s.component or 1, command, min(confirmation, 255), *p))

    def request_version(self) -> None:
        """Ask for AUTOPILOT_VERSION (MAV_CMD_REQUEST_MESSAGE); its answer fills ``state.firmware`` (one answer per
        request)."""
        self._version_pending = True
        self.command(self.mav.MAV_CMD_REQUEST_MESSAGE, self.mav.MAVLINK_MSG_ID_AUTOPILOT_VERSION)

    def ask_boot_clock(self) -> None:
        """Ask for SYSTEM_TIME once a second (MAV_CMD_SET_MESSAGE_INTERVAL): its ``time_boot_ms`` shows a reboot
        even when nothing else the autopilot sends carries its boot clock."""
        self.command(self.mav.MAV_CMD_SET_MESSAGE_INTERVAL, self.mav.MAVLINK_MSG_ID_SYSTEM_TIME, BOOT_CLOCK_INTERVAL_US)

    def set_mode(self, mode: str) -> None:
        """Ask for flight mode ``mode`` by pymavlink's name (its DO_SET_MODE for the autopilot heard)."""
        self.send(lambda m: self.conn.set_mode(mode))

    def mode_mapping(self) -> dict[str, Any]:
        """pymavlink's mode names for the autopilot heard (empty before a heartbeat)."""
        return self.conn.mode_mapping() or {}

    # ------------------------------------------------------------------ what callers read
    def wait_heartbeat(self, timeout_s: float) -> bool:
        """Whether the autopilot's heartbeat has been heard, waiting up to ``timeout_s`` for it."""
        end = self.clock() + timeout_s
        while self.state.last_heartbeat_s is None:
            if self.clock() > end:
                return False
            time.sleep(0.02)
        return True

    def wait_ack(self, command: int, timeout_s: float) -> int | None:
        """The result of the next COMMAND_ACK of ``command`` (taken from the kept ones), or None after
        ``timeout_s``."""
        end = self.clock() + timeout_s
        while self.clock() < end:
            for cmd, result in list(self.acks):
                if cmd == command:
                    self.acks.remove((cmd, result))
                    return result
            time.sleep(0.01)
        return None

    def heartbeat_age_s(self) -> float | None:
        last = self.state.last_heartbeat_s
        return None if last is None else self.clock() - last

    def link_ok(self) -> bool:
        """An autopilot heartbeat within ``link_timeout_s``."""
        age = self.heartbeat_age_s()
        return age is not None and age < self.link_timeout_s

    def link_error(self) -> str | None:
        """Why the autopilot is not heard now (one line), or None when it is."""
        age = self.heartbeat_age_s()
        if age is None:
            return f"no heartbeat from the autopilot on {self.endpoint} yet"
        if age >= self.link_timeout_s:
            return f"autopilot link lost: no heartbeat on {self.endpoint} for {age:.1f} s"
        return None

    def close(self) -> None:
        """Stop the reader and close the connection; a second call does nothing."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)
        self.conn.close()
