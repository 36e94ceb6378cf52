"""The emulator's one API schema: every definition the served kinds reach, read from
`kubernetes-1.33.json` (transcribed from upstream's Go types by `tools/kube_schema.py`).

Everything schema-shaped derives from this table, so nothing is kept twice: the OpenAPI v2
and v3 documents (`openapi.py`), the protobuf decoder (`protobuf.py`), server-side apply's
list and map types (`managed.py`) and field validation (`unknown_fields`, `prune`).

Contracts:
- The table is read once per process and never changes (`load_schema` is cached); a
  `Schema` and its `Definition`s are read-only.
- A `Definition`'s `properties` are its JSON fields with embedded (`json:",inline"`)
  structs flattened in, as a client sees them; `embeds` keeps the embedding for protobuf,
  where an embedded struct is one nested message.
- A shape is the schema of one value: `{"$ref": name}`, or `{"type": ...}` with `items`
  (arrays) or `additionalProperties` (maps), as in OpenAPI v2. Definitions without
  properties (Time, Quantity, IntOrString, RawExtension, FieldsV1, ...) are leaves.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

Shape = Mapping[str, Any]
_TYPE_META = "io.k8s.apimachinery.pkg.apis.meta.v1.TypeMeta"
# Leaves whose JSON value may be anything: their content is never checked or pruned.
FREE_FORM = frozenset(
    {
        "io.k8s.apimachinery.pkg.runtime.RawExtension",
        "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
    }
)


@dataclass(frozen=True)
class Embed:
    """A struct embedded inline: its fields are the parent's in JSON, one message in proto."""

    definition: str
    proto: int | None


@dataclass(frozen=True)
class Definition:
    name: str
    description: str
    raw: Mapping[str, Any]  # the table's entry as transcribed (own properties only)
    properties: Mapping[str, Shape]  # flattened, in declaration order
    required: tuple[str, ...]
    embeds: tuple[Embed, ...]
    gvks: tuple[tuple[str, str, str], ...]  # (group, version, kind)

    @property
    def is_object(self) -> bool:
        return self.raw.get("type") == "object" and self.name not in FREE_FORM

    @property
    def atomic(self) -> bool:
        """A struct replaced as a whole by server-side apply (`+structType=atomic`)."""
        return self.raw.get("x-kubernetes-map-type") == "atomic"


class Schema:
    """The definitions, and the lookups the emulator needs on them."""

    def __init__(self, table: Mapping[str, Any]) -> None:
        self.source: str = table["source"]
        raw: Mapping[str, Mapping[str, Any]] = table["definitions"]
        self._raw = raw
        self.definitions: dict[str, Definition] = {}
        for name in raw:
            self.definitions[name] = self._build(name)
        self._by_gvk: dict[tuple[str, str, str], Definition] = {}
        for definition in self.definitions.values():
            for gvk in definition.gvks:
                self._by_gvk[gvk] = definition

    def _build(self, name: str) -> Definition:
        entry = self._raw[name]
        properties: dict[str, Shape] = {}
        required: list[str] = []
        embeds: list[Embed] = []
        for embed in entry.get("x-inline", ()):
            inner = self._raw[embed["$ref"]]
            if embed.get("typeMeta"):
                properties.update(inner["properties"])
                continue
            embeds.append(Embed(embed["$ref"], embed.get("proto")))
            flattened = self._build(embed["$ref"])
            properties.update(flattened.properties)
            required += flattened.required
        properties.update(entry.get("properties", {}))
        required += entry.get("required", ())
        gvks = tuple(
            (g["group"], g["version"], g["kind"])
            for g in entry.get("x-kubernetes-group-version-kind", ())
        )
        return Definition(
            name,
            entry.get("description", ""),
            entry,
            properties,
            tuple(required),
            tuple(embeds),
            gvks,
        )

    def __getitem__(self, name: str) -> Definition:
        return self.definitions[name]

    def for_kind(self, group: str, version: str, kind: str) -> Definition | None:
        """The definition of a served kind (None for a kind the table does not hold)."""
        return self._by_gvk.get((group, version, kind))

    def kinds(self) -> Iterator[tuple[tuple[str, str, str], Definition]]:
        return iter(self._by_gvk.items())

    # -- walking values against shapes ---------------------------------------------------
    def resolve(self, shape: Shape) -> Definition | None:
        """The definition a shape refers to, or None for an inline shape."""
        ref = shape.get("$ref")
        return self.definitions[ref] if ref else None

    def unknown_fields(
        self, value: Any, shape: Shape, path: str = "", *, within: Any = None
    ) -> list[str]:
        """The paths of fields `value` has and its schema does not declare, in the order
        they appear (`spec.ports[0].foo`, as upstream's strict decoding names them).

        `within`, a document shaped like `value` (a merge patch), limits the search to the
        fields it names: what a merge patch did not name, it did not change."""
        found: list[str] = []
        if within is None:
            self._walk(value, shape, path, found, prune=False)
        else:
            self._walk_within(value, shape, path, found, within)
        return found

    def _walk_within(
        self, value: Any, shape: Shape, path: str, found: list[str], guide: Any
    ) -> None:
        if not isinstance(guide, dict) or not isinstance(value, dict):
            self._walk(value, shape, path, found, prune=False)
            return
        definition = self.resolve(shape)
        if definition is not None and not definition.is_object:
            return
        for key in sorted(value):
            if key not in guide:
                continue
            where = f"{path}.{key}" if path else key
            if definition is not None:
                child = definition.properties.get(key)
                if child is None:
                    found.append(where)
                    continue
            elif "additionalProperties" in shape:
                child = shape["additionalProperties"]
            else:
                continue
            self._walk_within(value[key], child, where, found, guide[key])

    def prune(self, value: Any, shape: Shape) -> Any:
        """`value` without the fields its schema does not declare (what decoding into the Go
        types does); the input is not changed."""
        return self._walk(value, shape, "", [], prune=True)

    def _walk(self, value: Any, shape: Shape, path: str, found: list[str], *, prune: bool) -> Any:
        definition = self.resolve(shape)
        if definition is not None:
            if not definition.is_object or not isinstance(value, dict):
                return value
            out: dict[str, Any] = {}
            for key, item in value.items():
                child = definition.properties.get(key)
                where = f"{path}.{key}" if path else key
                if child is None:
                    found.append(where)
                    continue
                out[key] = self._walk(item, child, where, found, prune=prune) if item else item
            return out if prune else value
        kind = shape.get("type")
        if kind == "array" and isinstance(value, list):
            items = shape["items"]
            walked = [
                self._walk(item, items, f"{path}[{i}]", found, prune=prune)
                for i, item in enumerate(value)
            ]
            return walked if prune else value
        if kind == "object" and isinstance(value, dict) and "additionalProperties" in shape:
            element = shape["additionalProperties"]
            walked_map = {
                key: self._walk(item, element, f"{path}.{key}" if path else key, found, prune=prune)
                for key, item in value.items()
            }
            return walked_map if prune else value
        return value


@functools.cache
def load_schema() -> Schema:
    """The schema table (read once; it never changes)."""
    data = importlib.resources.files(__package__).joinpath("kubernetes-1.33.json").read_bytes()
    return Schema(msgspec.json.decode(data))
