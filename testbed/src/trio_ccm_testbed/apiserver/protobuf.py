"""Protobuf request bodies, decoded by one generic wire-format reader driven by the schema.

kubectl 1.32+ sends typed creates (and `auth can-i`/`auth whoami`) as
`application/vnd.kubernetes.protobuf`: the magic `k8s\\0`, then a `runtime.Unknown`
envelope (typeMeta {apiVersion = 1, kind = 2}, raw = 2, contentEncoding = 3,
contentType = 4) whose `raw` is the object's message. No generated code: each message is
read field by field and each field number is looked up in the schema table
(`schema/kubernetes-1.33.json`, field numbers from upstream's `generated.proto`).

Decoding follows what the Go types would hold and then serialise as JSON:
- gogo-protobuf writes every non-pointer scalar and struct, even when empty, so an empty
  string, a zero, `false` or an empty struct in a non-pointer field is dropped (JSON's
  `omitempty`); a pointer field keeps what it carries (`replicas: 0` stays).
- Unknown field numbers are skipped, as upstream's unmarshalling skips them.
- The types with their own encoding: Time/MicroTime (seconds = 1, nanos = 2), Quantity
  (string = 1), IntOrString (type = 1, intVal = 2, strVal = 3), RawExtension and FieldsV1
  (raw JSON = 1), Duration (nanoseconds = 1).

`encode_*` are the writing half, used for the OpenAPI v2 document kubectl 1.27/1.28 ask
for in protobuf. Malformed input raises `ProtobufError` naming what is wrong.
"""

from __future__ import annotations

import base64
import datetime as dt
import struct
from collections.abc import Iterator
from typing import Any

import msgspec

from trio_ccm_testbed.apiserver.schema import Definition, Schema, Shape

MAGIC = b"k8s\x00"
PROTOBUF_TYPE = "application/vnd.kubernetes.protobuf"

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5
_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_TIMES = (_META + "Time", _META + "MicroTime")


class ProtobufError(ValueError):
    """A body that is not the protobuf encoding of a served object."""


# -- the wire format -------------------------------------------------------------------
def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("varint longer than 10 bytes")


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) for each field of a message, in order."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtobufError("field number 0")
        value: int | bytes
        if wire == VARINT:
            value, pos = _varint(data, pos)
        elif wire == LENGTH:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ProtobufError(f"field {number}: {size} bytes announced, fewer remain")
            value, pos = data[pos : pos + size], pos + size
        elif wire == FIXED64:
            if pos + 8 > len(data):
                raise ProtobufError(f"field {number}: truncated 64-bit value")
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == FIXED32:
            if pos + 4 > len(data):
                raise ProtobufError(f"field {number}: truncated 32-bit value")
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ProtobufError(f"field {number}: unsupported wire type {wire}")
        yield number, wire, value


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


# -- decoding against the schema --------------------------------------------------------
class _Fields:
    """A definition's fields by protobuf number (own fields and embedded structs)."""

    def __init__(self, schema: Schema, definition: Definition) -> None:
        self.by_number: dict[int, tuple[str, Shape]] = {}
        self.shapes: dict[str, Shape] = {}
        for name, shape in definition.raw.get("properties", {}).items():
            if "x-proto" in shape:
                self.by_number[shape["x-proto"]] = (name, shape)
                self.shapes[name] = shape
        self.embeds = {e.proto: e.definition for e in definition.embeds if e.proto is not None}


class Decoder:
    """Decodes protobuf-encoded objects into their JSON form, per the schema."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self._fields: dict[str, _Fields] = {}

    def _index(self, name: str) -> _Fields:
        found = self._fields.get(name)
        if found is None:
            found = self._fields[name] = _Fields(self.schema, self.schema[name])
        return found

    def decode_envelope(self, body: bytes) -> dict[str, Any]:
        """The object a `k8s\\0` + runtime.Unknown body carries, with apiVersion and kind."""
        if not body.startswith(MAGIC):
            raise ProtobufError("the body does not start with the k8s protobuf magic")
        api_version = kind = ""
        raw = b""
        for number, _, value in fields(body[len(MAGIC) :]):
            if number == 1 and isinstance(value, bytes):
                for inner, _, text in fields(value):
                    if inner == 1 and isinstance(text, bytes):
                        api_version = text.decode()
                    elif inner == 2 and isinstance(text, bytes):
                        kind = text.decode()
            elif number == 2 and isinstance(value, bytes):
                raw = value
            elif number == 3 and isinstance(value, bytes) and value:
                raise ProtobufError(f"content encoding {value.decode()!r} is not supported")
        group, _, version = api_version.rpartition("/")
        definition = self.schema.for_kind(group, version, kind)
        if definition is None:
            raise ProtobufError(f"no protobuf schema for kind {kind!r} in {api_version!r}")
        obj = {"kind": kind, "apiVersion": api_version}
        obj.update(self.message(definition.name, raw))
        return obj

    def message(self, name: str, data: bytes) -> dict[str, Any]:
        """The JSON object of message `name` (a definition with properties)."""
        index = self._index(name)
        out: dict[str, Any] = {}
        for number, wire, value in fields(data):
            embedded = index.embeds.get(number)
            if embedded is not None and isinstance(value, bytes):
                out.update(self.message(embedded, value))
                continue
            found = index.by_number.get(number)
            if found is None:
                continue  # unknown fields are skipped, as upstream does
            key, shape = found
            self._put(out, key, shape, wire, value)
        # Go's JSON form of what was decoded: an empty non-pointer value is omitted.
        for key, value in list(out.items()):
            own = index.shapes.get(key)
            if own is not None and not own.get("x-pointer") and _is_zero(value):
                del out[key]
        return out

    def _put(self, out: dict[str, Any], key: str, shape: Shape, wire: int, value: Any) -> None:
        kind = shape.get("type")
        if kind == "array" and shape["items"].get("format") != "byte":
            items = out.setdefault(key, [])
            element = shape["items"]
            if wire == LENGTH and _packable(element) and isinstance(value, bytes):
                items.extend(self._unpack(element, value))
            else:
                items.append(self._value(element, wire, value))
            return
        if kind == "object" and "additionalProperties" in shape:
            if not isinstance(value, bytes):
                raise ProtobufError(f"{key}: a map entry must be a message")
            entry_key, entry_value = "", None
            element = shape["additionalProperties"]
            for number, entry_wire, item in fields(value):
                if number == 1 and isinstance(item, bytes):
                    entry_key = item.decode()
                elif number == 2:
                    entry_value = self._value(element, entry_wire, item)
            if entry_value is None:
                entry_value = _empty(element)
            out.setdefault(key, {})[entry_key] = entry_value
            return
        out[key] = self._value(shape, wire, value)

    def _unpack(self, element: Shape, data: bytes) -> list[Any]:
        values: list[Any] = []
        pos = 0
        if element.get("type") == "number":
            size = 8 if element.get("format") == "double" else 4
            form = "<d" if size == 8 else "<f"
            while pos < len(data):
                values.append(struct.unpack(form, data[pos : pos + size])[0])
                pos += size
            return values
        while pos < len(data):
            raw, pos = _varint(data, pos)
            values.append(self._scalar(element, raw))
        return values

    def _scalar(self, shape: Shape, raw: int) -> Any:
        kind = shape.get("type")
        if kind == "boolean":
            return raw != 0
        if kind == "integer":
            return _signed(raw, 32 if shape.get("format") == "int32" else 64)
        raise ProtobufError(f"a varint where a {kind} was expected")

    def _value(self, shape: Shape, wire: int, value: Any) -> Any:
        ref = shape.get("$ref")
        if ref is not None:
            if not isinstance(value, bytes):
                raise ProtobufError(f"{ref.rsplit('.', 1)[-1]}: expected a message")
            return self._special(ref, value) if ref in _SPECIAL else self.message(ref, value)
        kind = shape.get("type")
        if isinstance(value, int):
            return self._scalar(shape, value)
        if kind == "number":
            return struct.unpack("<d" if len(value) == 8 else "<f", value)[0]
        if kind == "string" and shape.get("format") == "byte":
            return base64.b64encode(value).decode()
        if kind == "string":
            try:
                return value.decode()
            except UnicodeDecodeError as exc:
                raise ProtobufError(f"a string field is not UTF-8: {exc}") from exc
        if kind == "array" and shape.get("x-proto-wrapped"):
            # A named slice type (ExtraValue): a message whose field 1 repeats the items.
            return [self._value(shape["items"], w, v) for n, w, v in fields(value) if n == 1]
        raise ProtobufError(f"cannot decode a {kind} from wire type {wire}")

    def _special(self, ref: str, data: bytes) -> Any:
        values = {number: value for number, _, value in fields(data)}
        if ref in _TIMES:
            seconds = _signed(int(values.get(1, 0)), 64)
            nanos = int(values.get(2, 0))
            if seconds == 0 and nanos == 0:
                return None
            moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
            if ref.endswith("MicroTime"):
                micros = moment.replace(microsecond=nanos // 1000)
                return micros.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        if ref.endswith("IntOrString"):
            if int(values.get(1, 0)) == 1:
                return bytes(values.get(3, b"")).decode()
            return _signed(int(values.get(2, 0)), 32)
        if ref.endswith("Quantity"):
            return bytes(values.get(1, b"")).decode()
        if ref.endswith("Duration"):
            return _go_duration(_signed(int(values.get(1, 0)), 64))
        raw = bytes(values.get(1, b""))
        if not raw:
            return {}
        try:
            return msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            raise ProtobufError(f"{ref.rsplit('.', 1)[-1]} does not hold JSON: {exc}") from exc


_SPECIAL = frozenset(
    {
        *_TIMES,
        _META + "Duration",
        _META + "FieldsV1",
        "io.k8s.apimachinery.pkg.api.resource.Quantity",
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
        "io.k8s.apimachinery.pkg.runtime.RawExtension",
    }
)


def _packable(shape: Shape) -> bool:
    return shape.get("type") in ("integer", "boolean", "number")


def _empty(shape: Shape) -> Any:
    kind = shape.get("type")
    if kind == "string":
        return ""
    if kind == "integer":
        return 0
    if kind == "boolean":
        return False
    return {}


def _is_zero(value: Any) -> bool:
    if isinstance(value, bool):
        return not value
    return value is None or value in ("", 0) or value == {} or value == []


def _go_duration(nanos: int) -> str:
    """Go's time.Duration.String() for the durations the API carries."""
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    nanos = abs(nanos)
    hours, rest = divmod(nanos, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    seconds = rest / 1e9
    text = f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


# -- encoding (the writing half) --------------------------------------------------------
def encode_varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_field(number: int, value: int | bool | float | str | bytes) -> bytes:
    """One field: ints and bools as varints, floats as doubles, str/bytes length-delimited."""
    if isinstance(value, bool | int):
        return encode_varint(number << 3 | VARINT) + encode_varint(int(value))
    if isinstance(value, float):
        return encode_varint(number << 3 | FIXED64) + struct.pack("<d", value)
    data = value.encode() if isinstance(value, str) else value
    return encode_varint(number << 3 | LENGTH) + encode_varint(len(data)) + data
