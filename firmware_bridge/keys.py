"""python -m firmware_bridge.keys DIR NAME [NAME ...]: make CurveZMQ key pairs.

Each NAME gets ``DIR/NAME.key`` (public key, safe to copy anywhere) and
``DIR/NAME.key_secret`` (public + secret key, mode 0600, never leaves its
machine). These are pyzmq ``zmq.auth`` certificate files, so the bridge and the
host load them with :func:`zmq.auth.load_certificate`.

Typical set-up (docs/reliability.md): ``bridge`` for the Pi, ``host`` for each
machine allowed to fly it. The Pi keeps ``bridge.key_secret`` and a directory of
allowed clients' ``*.key`` files; each host keeps its own ``host.key_secret``
and the Pi's ``bridge.key``.

Also the shared helpers that put keys on sockets, so the bridge (server) and
firmware_bridge.client (client) configure CURVE the same way.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

from firmware_bridge.cli import OneLineArgumentParser, UsageError, check_output_dir, fail

PROG = "firmware_bridge.keys"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class KeyFileError(ValueError):
    """A key file is missing, unreadable or lacks the part we need."""


def curve_available() -> bool:
    """False if libzmq was built without libsodium/tweetnacl (then CURVE cannot work)."""
    return bool(zmq.has("curve"))


def create_key_pair(directory: str | os.PathLike[str], name: str) -> tuple[Path, Path]:
    """Write NAME.key and NAME.key_secret into ``directory``; refuse to overwrite existing keys."""
    if not _NAME_RE.match(name):
        raise KeyFileError(f"key name {name!r} must be letters, digits, '_', '-' or '.' (at most 64)")
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # e.g. a file of that name: FileExistsError, which is no traceback's business
        raise KeyFileError(f"cannot make key directory {directory}: {exc.strerror or exc}") from None
    public, secret = directory / f"{name}.key", directory / f"{name}.key_secret"
    for path in (public, secret):
        if path.exists():
            raise KeyFileError(f"{path} exists; delete it first if you really want a new key pair")
    zmq.auth.create_certificates(directory, name)
    os.chmod(secret, 0o600)
    return public, secret


def load_public_key(path: str | os.PathLike[str]) -> bytes:
    """The Z85 public key from a .key (or .key_secret) certificate file."""
    try:
        public, _ = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot read public key {path}: {exc}") from None
    if not public:
        raise KeyFileError(f"{path} holds no public key")
    return public


def load_key_pair(path: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    """(public, secret) from a .key_secret certificate file."""
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot read key pair {path}: {exc}") from None
    if not public or not secret:
        raise KeyFileError(f"{path} holds no secret key (use the NAME.key_secret file, not NAME.key)")
    return public, secret


def allowed_client_keys(directory: str | os.PathLike[str]) -> list[Path]:
    """The public key files the bridge accepts: every *.key in ``directory``."""
    directory = Path(directory)
    if not directory.is_dir():
        raise KeyFileError(f"allowed-clients directory {directory} does not exist")
    return sorted(directory.glob("*.key"))


@dataclass(frozen=True)
class ClientCurve:
    """What a host needs to talk to a CURVE bridge: its own key pair and the bridge's public key."""

    public: bytes
    secret: bytes
    server_public: bytes

    @classmethod
    def from_files(
        cls, client_secret_file: str | os.PathLike[str], server_public_file: str | os.PathLike[str]
    ) -> ClientCurve:
        public, secret = load_key_pair(client_secret_file)
        return cls(public=public, secret=secret, server_public=load_public_key(server_public_file))

    def apply(self, socket: zmq.Socket) -> None:
        # Must be set before connect(). A bridge holding another key fails the handshake: the
        # host then gets no reply at all, which is how "the host verifies the bridge's key" shows.
        socket.curve_secretkey = self.secret
        socket.curve_publickey = self.public
        socket.curve_serverkey = self.server_public


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog=PROG, description="Make CurveZMQ key pairs for the bridge and its hosts.")
    parser.add_argument("directory", help="where to write NAME.key and NAME.key_secret")
    parser.add_argument("names", nargs="+", metavar="NAME", help="e.g. bridge host")
    args = parser.parse_args(argv)
    try:
        check_output_dir(args.directory)
    except UsageError as exc:
        fail(str(exc), prog=PROG)
    if not curve_available():
        fail("this libzmq has no CURVE support (pyzmq wheels do; a distro libzmq may not)", prog=PROG)
    for name in args.names:
        try:
            public, secret = create_key_pair(args.directory, name)
        except KeyFileError as exc:
            fail(str(exc), prog=PROG)
        print(f"{name}: public {public}  secret {secret}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
