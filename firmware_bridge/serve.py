"""python -m firmware_bridge.serve --bind tcp://0.0.0.0:5555 [--policy FILE] ...

Runs the bridge in the foreground until SIGTERM/SIGINT. Prints one line
``airq-bridge listening on <endpoint>`` on stdout once bound (with ``tcp://HOST:*``
that is how a launcher learns the ephemeral port); logs go to stderr.
"""

from __future__ import annotations

import errno
import logging
import sys
from pathlib import Path

import zmq

from firmware_bridge import __version__
from firmware_bridge.actuators import ACTUATOR_KINDS, check_fc, make_actuator
from firmware_bridge.cli import READY_PREFIX, OneLineArgumentParser, fail, positive_int
from firmware_bridge.keys import KeyFileError, curve_available
from firmware_bridge.mavlink_link import ENDPOINT_FORMS
from firmware_bridge.protocol import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_MODEL_BYTES,
    DEFAULT_MAX_PEERS,
    DEFAULT_PORT,
    parse_tcp_endpoint,
)

PROG = "firmware_bridge.serve"
# sysexits.h EX_TEMPFAIL: try again later (an address not assigned yet at boot).
TRANSIENT_FAILURE_EXIT = 75
MIN_MESSAGE_BYTES = 1024


def build_parser() -> OneLineArgumentParser:
    parser = OneLineArgumentParser(prog=PROG, description="Serve an airq ONNX policy over ZeroMQ (device side).")
    parser.add_argument(
        "--bind",
        default=f"tcp://0.0.0.0:{DEFAULT_PORT}",
        help="tcp://HOST:PORT to listen on; PORT may be * (ephemeral)",
    )
    parser.add_argument("--policy", metavar="FILE", help="ONNX policy to load at startup (hosts can also upload one)")
    parser.add_argument("--threads", type=positive_int, default=1, help="onnxruntime intra-op threads (default 1)")
    parser.add_argument("--actuator", choices=ACTUATOR_KINDS, default="mock", help="where setpoints go (default mock)")
    parser.add_argument(
        "--fc",
        metavar="ENDPOINT",
        help=f"--actuator mavlink: the flight controller, {ENDPOINT_FORMS} (docs/autopilot.md)",
    )
    parser.add_argument(
        "--fc-signing-key",
        metavar="FILE",
        help="--actuator mavlink: sign the flight-controller link with MAVLink 2 signing and drop what is not signed "
        "with this key; FILE holds 64 hex digits or a passphrase (mode 600; docs/autopilot.md section 5)",
    )
    parser.add_argument(
        "--hold-timeout-ms", type=positive_int, default=200, help="hover if no act arrives for this long (default 200)"
    )
    parser.add_argument(
        "--max-message-bytes",
        type=positive_int,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        help="largest accepted message: an act, or one chunk of a policy upload",
    )
    parser.add_argument(
        "--max-model-bytes",
        type=positive_int,
        default=DEFAULT_MAX_MODEL_BYTES,
        help="largest policy a host may upload (assembled from chunks in one staging buffer)",
    )
    parser.add_argument(
        "--max-peers",
        type=positive_int,
        default=DEFAULT_MAX_PEERS,
        help="peers served at once; a request from any other is answered BUSY and not executed; TCP connections "
        "beyond twice this many are closed at once (bounds memory)",
    )
    parser.add_argument(
        "--curve-secret",
        metavar="FILE",
        help="CurveZMQ: this bridge's key pair (NAME.key_secret from python -m firmware_bridge.keys)",
    )
    parser.add_argument(
        "--curve-clients",
        metavar="DIR",
        help="CurveZMQ: directory of allowed client public keys (*.key); others get no answer",
    )
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    parser.add_argument("--version", action="version", version=f"airq firmware_bridge {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level.upper(), format="airq-bridge %(levelname)s: %(message)s"
    )
    try:
        parse_tcp_endpoint(args.bind, allow_wildcard_port=True)
    except ValueError as exc:
        fail(f"--bind: {exc}", prog=PROG)
    if args.max_message_bytes < MIN_MESSAGE_BYTES:
        fail(f"--max-message-bytes must be at least {MIN_MESSAGE_BYTES}", prog=PROG)
    if (args.curve_secret is None) != (args.curve_clients is None):
        fail("--curve-secret and --curve-clients go together (the bridge's key and who may connect)", prog=PROG)
    try:
        signing_key = check_fc(args.actuator, args.fc, args.fc_signing_key)
    except ValueError as exc:
        fail(str(exc), prog=PROG)

    # deferred: onnxruntime (via firmware_bridge.policy, firmware_bridge.server), imported after the argument
    # checks so `--help` and typos answer instantly (onnxruntime takes ~0.3 s to import)
    from firmware_bridge.policy import PolicyLoadError, load_policy_file
    from firmware_bridge.server import BridgeConfig, BridgeServer

    policy = None
    if args.policy:
        path = Path(args.policy)
        try:
            # The operator chose this file, so no upload size limit applies to it.
            policy = load_policy_file(str(path), threads=args.threads, name=path.name)
        except FileNotFoundError:
            fail(f"--policy {args.policy}: no such file", prog=PROG)
        except OSError as exc:
            fail(f"--policy {args.policy}: cannot read: {exc.strerror}", prog=PROG)
        except PolicyLoadError as exc:
            fail(f"--policy {args.policy}: {exc.code}: {exc.message}", prog=PROG)

    config = BridgeConfig(
        bind=args.bind,
        threads=args.threads,
        hold_timeout_ms=args.hold_timeout_ms,
        max_message_bytes=args.max_message_bytes,
        max_model_bytes=args.max_model_bytes,
        max_peers=args.max_peers,
        curve_secret_file=args.curve_secret,
        curve_clients_dir=args.curve_clients,
    )
    if config.authenticated and not curve_available():
        fail("--curve-secret: this libzmq has no CURVE support", prog=PROG)
    try:
        actuator = make_actuator(args.actuator, args.fc, signing_key)
    except ValueError as exc:
        fail(str(exc), prog=PROG)
    try:
        server = BridgeServer(config, actuator)
    except KeyFileError as exc:
        fail(str(exc), prog=PROG)
    except zmq.ZMQError as exc:
        if exc.errno == errno.EADDRNOTAVAIL:
            # At boot the address may not be up yet: a distinct code that systemd's Restart=on-failure
            # retries (exit 2 is RestartPreventExitStatus: a configuration error a restart cannot fix).
            print(
                f"error: --bind {args.bind}: address not available yet (network not up?); exit "
                f"{TRANSIENT_FAILURE_EXIT} so the service manager retries",
                file=sys.stderr,
            )
            return TRANSIENT_FAILURE_EXIT
        fail(f"--bind {args.bind}: cannot bind: {zmq.strerror(exc.errno or 0)}", prog=PROG)
    if policy is not None:
        server.install_policy(policy)
    server.install_signal_handlers()
    print(f"{READY_PREFIX}{server.endpoint}", flush=True)
    logging.getLogger("firmware_bridge").info(
        "bridge %s serving on %s (threads=%d, actuator=%s, hold=%d ms, %s)",
        __version__,
        server.endpoint,
        args.threads,
        args.actuator,
        args.hold_timeout_ms,
        "CurveZMQ authenticated" if config.authenticated else "UNAUTHENTICATED",
    )
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
