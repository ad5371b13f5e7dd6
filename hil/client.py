"""The bridge client, re-exported: it lives in :mod:`firmware_bridge.client`.

It moved there so the device-side tools (``firmware_bridge.bench``, the launcher's readiness probe)
use the same client as the control loop; ``firmware_bridge`` may import nothing else of this repo.
New code imports from ``firmware_bridge.client``.
"""

from firmware_bridge.client import (
    CLIENT_NAME,
    CONTENDED_GAP_NS,
    DEFAULT_SPIN_US,
    SPIN_BACKOFF_MAX,
    UPLOAD_ENVELOPE_BYTES,
    ActResult,
    BridgeClient,
    BridgeError,
    BridgeProtocolError,
    BridgeRefused,
    BridgeUnreachable,
    BridgeUnresolvable,
    resolve_host,
)

__all__ = [
    "CLIENT_NAME",
    "CONTENDED_GAP_NS",
    "DEFAULT_SPIN_US",
    "SPIN_BACKOFF_MAX",
    "UPLOAD_ENVELOPE_BYTES",
    "ActResult",
    "BridgeClient",
    "BridgeError",
    "BridgeProtocolError",
    "BridgeRefused",
    "BridgeUnreachable",
    "BridgeUnresolvable",
    "resolve_host",
]
