"""Refuse uploaded models that would make onnxruntime open a file on the device.

An ONNX tensor may keep its bytes in an *external data* file named by a relative path
(TensorProto.data_location = EXTERNAL, external_data "location"). onnxruntime resolves it against
the process's working directory when a model is loaded from memory, so a peer could upload a tiny
graph that returns the bytes of, say, the bridge's secret key as logits. The bridge has no `onnx`
package, so this module walks the protobuf wire format itself, through every place a tensor can sit:
graph initializers and sparse initializers, node attributes (Constant's value, tensors lists,
sparse tensors), subgraphs of If/Loop/Scan (attribute g / graphs), model-local functions and
training-info graphs, at any nesting depth. It runs before onnxruntime sees the bytes; anything it
cannot walk is refused too, so a parser disagreement cannot smuggle a tensor past it.

Field numbers are onnx.proto's (onnx 1.x; checked against the installed onnx package by
tests/firmware_bridge/test_model_external_data.py).
"""

from __future__ import annotations

from collections.abc import Iterator

# message kind -> {field number: message kind of that (embedded, length-delimited) field}
_CHILDREN: dict[str, dict[int, str]] = {
    "model": {7: "graph", 20: "training_info", 25: "function"},
    "training_info": {1: "graph", 2: "graph"},
    "function": {7: "node", 11: "attribute"},
    "graph": {1: "node", 5: "tensor", 15: "sparse_tensor"},
    "node": {5: "attribute"},
    "attribute": {5: "tensor", 6: "graph", 10: "tensor", 11: "graph", 22: "sparse_tensor", 23: "sparse_tensor"},
    "sparse_tensor": {1: "tensor", 2: "tensor"},
    "tensor": {},
}
TENSOR_NAME = 8
TENSOR_EXTERNAL_DATA = 13
TENSOR_DATA_LOCATION = 14
DATA_LOCATION_EXTERNAL = 1
ENTRY_KEY, ENTRY_VALUE = 1, 2
# Nested subgraphs deeper than this are not a policy; a bound keeps a crafted model from costing the
# device unbounded work.
MAX_DEPTH = 32

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5


class UnsafeModel(ValueError):
    """The model references a file or cannot be parsed; str() is one line for the BAD_POLICY reply."""


def check_self_contained(model: bytes) -> None:
    """Raise UnsafeModel if any tensor of the model lives in external data (or the bytes do not parse)."""
    view = memoryview(model)
    stack = [("model", 0, len(view), 0)]
    while stack:
        kind, start, end, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise UnsafeModel(f"model nests subgraphs deeper than {MAX_DEPTH} levels")
        children = _CHILDREN[kind]
        external_entries: list[tuple[int, int]] = []
        location_external = False
        name = ""
        for field, wire, value, value_end in _fields(view, start, end):
            if kind == "tensor":
                if field == TENSOR_EXTERNAL_DATA and wire == LENGTH_DELIMITED:
                    external_entries.append((value, value_end))
                elif field == TENSOR_DATA_LOCATION and wire == VARINT:
                    location_external = value == DATA_LOCATION_EXTERNAL
                elif field == TENSOR_NAME and wire == LENGTH_DELIMITED:
                    name = bytes(view[value:value_end][:64]).decode("utf-8", "replace")
            elif field in children and wire == LENGTH_DELIMITED:
                stack.append((children[field], value, value_end, depth + 1))
        if external_entries or location_external:
            location = _external_location(view, external_entries)
            where = f" file {location!r}" if location else ""
            raise UnsafeModel(
                f"tensor {_printable(name)!r} references external data{where}: only self-contained models "
                "are accepted (save with all tensors inside the file)"
            )


def _external_location(view: memoryview, entries: list[tuple[int, int]]) -> str:
    for start, end in entries:
        key = value = b""
        for field, wire, offset, offset_end in _fields(view, start, end):
            if wire == LENGTH_DELIMITED and field == ENTRY_KEY:
                key = bytes(view[offset:offset_end])
            elif wire == LENGTH_DELIMITED and field == ENTRY_VALUE:
                value = bytes(view[offset:offset_end][:128])
        if key == b"location":
            return _printable(value.decode("utf-8", "replace"))
    return ""


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)


def _fields(view: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field, wire type, value or offset, end offset) for each field of one message slice."""
    pos = start
    while pos < end:
        key, pos = _varint(view, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise UnsafeModel("model is not a valid ONNX protobuf (field number 0)")
        if wire == VARINT:
            value, pos = _varint(view, pos, end)
            yield field, wire, value, pos
        elif wire == LENGTH_DELIMITED:
            length, pos = _varint(view, pos, end)
            if length > end - pos:
                raise UnsafeModel("model is not a valid ONNX protobuf (a field runs past its message)")
            yield field, wire, pos, pos + length
            pos += length
        elif wire in (FIXED64, FIXED32):
            pos += 8 if wire == FIXED64 else 4
            if pos > end:
                raise UnsafeModel("model is not a valid ONNX protobuf (truncated)")
        else:  # groups (3, 4) are not used by onnx.proto; 6 and 7 do not exist
            raise UnsafeModel(f"model is not a valid ONNX protobuf (wire type {wire})")


def _varint(view: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise UnsafeModel("model is not a valid ONNX protobuf (truncated or overlong varint)")
        byte = view[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
