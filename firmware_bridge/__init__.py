"""airq firmware bridge: serves an ONNX drone policy on the device (Raspberry Pi).

Runs with only numpy, onnxruntime, pyzmq and msgpack installed. The wire protocol
lives in :mod:`firmware_bridge.protocol` (pure numpy + msgpack, importable by the host).
"""

__version__ = "0.1.0"
