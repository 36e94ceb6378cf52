"""Managed fields and server-side apply, as structured-merge-diff and the apiserver's field
manager compute them, on the list and map types of the schema table.

Vocabulary (structured-merge-diff's):
- A *path* names a node of an object: a field (`.spec`), an item of an associative list by
  its keys (`[port=80,protocol="TCP"]`), an item of a set (`[="a"]`) or an index.
- A *field set* is a set of paths. `field_set(obj)` holds what an applied configuration
  sets; `compare(old, new)` gives what a write added, modified and removed.
- Lists and maps merge by the schema: `x-kubernetes-list-type` atomic / set / map (with
  `x-kubernetes-list-map-keys`; key fields missing from an item take their schema
  default), or, where a list has no list type, its patch strategy (`merge` with a merge
  key: a map list; without one: a set); anything else is atomic. Maps are granular unless
  `x-kubernetes-map-type: atomic`; structs unless `+structType=atomic`.

Rules kept (upstream's `fieldmanager` and `merge.Updater`):
- Every write records, per manager, the fields it owns in `metadata.managedFields`
  (`operation: Update` for create/update/patch, keyed by manager, API version and
  subresource; `operation: Apply` for server-side apply, keyed by manager and subresource).
- An update takes ownership of what it added or changed, from every other manager; a
  removed field is owned by nobody. A manager's `time` moves only when it took fields.
- An apply owns exactly the fields of its configuration. A field another manager owns and
  the apply would change is a conflict (409) unless `force=true`, which moves it. Fields
  the applier set last time, no longer sets, and nobody else owns are removed.
- `apiVersion`, `kind`, `metadata` itself and the server-owned metadata fields are never
  owned; on the main endpoint of a kind with a status subresource `.status` is not, on
  `/status` `.spec` is not (upstream's reset fields).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from trio_ccm_testbed.apiserver.errors import ApiError
from trio_ccm_testbed.apiserver.schema import Schema, Shape

Obj = dict[str, Any]
PathElement = tuple[str, Any]  # ("f", name) | ("k", ((key, json), ...)) | ("v", json) | ("i", n)
Path = tuple[PathElement, ...]
FieldSet = set[Path]

APPLY, UPDATE = "Apply", "Update"
BEFORE_FIRST_APPLY = "before-first-apply"


class _Missing:
    """An absent value (Go's nil), as opposed to a JSON null."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()

_STRIPPED: frozenset[Path] = frozenset(
    {
        (("f", "apiVersion"),),
        (("f", "kind"),),
        (("f", "metadata"),),
        *(
            (("f", "metadata"), ("f", name))
            for name in (
                "name",
                "namespace",
                "creationTimestamp",
                "selfLink",
                "uid",
                "clusterName",
                "generation",
                "managedFields",
                "resourceVersion",
            )
        ),
    }
)


class SchemaError(Exception):
    """A value that does not fit the schema (what upstream reports as a typed-object error)."""


# -- the type model ----------------------------------------------------------------------
@dataclass(frozen=True)
class _Node:
    kind: str  # "struct", "map", "list" or "leaf"
    atomic: bool = False
    fields: Mapping[str, Shape] = field(default_factory=dict)  # struct
    element: Shape | None = None  # map values, list items
    relation: str = "atomic"  # list: atomic, set or map
    keys: tuple[str, ...] = ()
    key_defaults: Mapping[str, Any] = field(default_factory=dict)


_LEAF = _Node("leaf")


class Types:
    """The merge behaviour of each shape of the schema."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        # A bare reference is cached by its name; any other shape is one of the schema's own
        # dicts (immutable, alive as long as the cached schema), so by its identity.
        self._nodes: dict[object, _Node] = {}

    def node(self, shape: Shape) -> _Node:
        key: object = shape["$ref"] if len(shape) == 1 and "$ref" in shape else id(shape)
        found = self._nodes.get(key)
        if found is None:
            found = self._nodes[key] = self._node(shape)
        return found

    def _node(self, shape: Shape) -> _Node:
        definition = self.schema.resolve(shape)
        if definition is not None:
            if not definition.is_object:
                return _LEAF
            return _Node("struct", atomic=definition.atomic, fields=definition.properties)
        kind = shape.get("type")
        if kind == "object" and "additionalProperties" in shape:
            atomic = shape.get("x-kubernetes-map-type") == "atomic"
            return _Node("map", atomic=atomic, element=shape["additionalProperties"])
        if kind == "array" and shape.get("items", {}).get("format") != "byte":
            return self._list(shape)
        return _LEAF

    def _list(self, shape: Shape) -> _Node:
        element = shape["items"]
        list_type = shape.get("x-kubernetes-list-type")
        keys: tuple[str, ...] = tuple(shape.get("x-kubernetes-list-map-keys", ()))
        if list_type is None:
            if "merge" in str(shape.get("x-kubernetes-patch-strategy", "")).split(","):
                merge_key = shape.get("x-kubernetes-patch-merge-key")
                list_type, keys = ("map", (merge_key,)) if merge_key else ("set", ())
            else:
                list_type = "atomic"
        if list_type == "atomic":
            return _Node("list", atomic=True, element=element)
        defaults: dict[str, Any] = {}
        item = self.schema.resolve(element)
        if list_type == "map" and item is not None:
            for key in keys:
                default = item.properties.get(key, {}).get("default")
                if default is not None:
                    defaults[key] = default
        return _Node("list", element=element, relation=list_type, keys=keys, key_defaults=defaults)

    def item_element(self, node: _Node, item: Any, index: int) -> PathElement:
        """The path element of a list item (its keys, its value, or its index)."""
        if node.relation == "set":
            return ("v", _canon(item))
        if node.relation == "map":
            if not isinstance(item, dict):
                raise SchemaError(f"element {index}: expected a map, got {_go_kind(item)}")
            fields: list[tuple[str, str]] = []
            for key in node.keys:
                if key in item and item[key] is not None:
                    fields.append((key, _canon(item[key])))
                elif key in node.key_defaults:
                    fields.append((key, _canon(node.key_defaults[key])))
                else:
                    raise SchemaError(
                        f"element {index}: associative list with keys has an element that "
                        f'omits key field "{key}" (and doesn\'t have default value)'
                    )
            return ("k", tuple(sorted(fields)))
        return ("i", index)


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _go_kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


# -- paths as text --------------------------------------------------------------------------
def path_text(path: Path) -> str:
    """A path as upstream prints it in conflicts: `.spec.ports[port=80,protocol="TCP"]`."""
    out = []
    for kind, value in path:
        if kind == "f":
            out.append("." + value)
        elif kind == "k":
            out.append("[" + ",".join(f"{k}={v}" for k, v in value) + "]")
        elif kind == "v":
            out.append(f"[={value}]")
        else:
            out.append(f"[{value}]")
    return "".join(out)


_RANK = {"f": 0, "k": 1, "v": 2, "i": 3}


def _element_key(element: PathElement) -> tuple[int, Any]:
    kind, value = element
    return (_RANK[kind], value)


def _element_text(element: PathElement) -> str:
    kind, value = element
    if kind == "f":
        return f"f:{value}"
    if kind == "k":
        return "k:{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in value) + "}"
    if kind == "v":
        return f"v:{value}"
    return f"i:{value}"


def _parse_element(text: str) -> PathElement:
    kind, _, rest = text.partition(":")
    if kind == "f":
        return ("f", rest)
    if kind == "k":
        decoded = json.loads(rest)
        return ("k", tuple(sorted((k, _canon(v)) for k, v in decoded.items())))
    if kind == "v":
        return ("v", _canon(json.loads(rest)))
    if kind == "i":
        return ("i", int(rest))
    raise ValueError(f"unknown path element {text!r}")


def to_fields_v1(paths: Iterable[Path]) -> Obj:
    """A field set as the `fieldsV1` JSON of a managedFields entry."""
    tree: dict[PathElement, Any] = {}
    members: set[Path] = set(paths)
    for path in members:
        node = tree
        for element in path:
            node = node.setdefault(element, {})

    def emit(node: dict[PathElement, Any], prefix: Path) -> Obj:
        out: Obj = {}
        if prefix in members and node and prefix:
            out["."] = {}
        for element in sorted(node, key=_element_key):
            out[_element_text(element)] = emit(node[element], (*prefix, element))
        return out

    return emit(tree, ())


def from_fields_v1(value: Mapping[str, Any], prefix: Path = ()) -> FieldSet:
    """The field set of a `fieldsV1` JSON value."""
    out: FieldSet = set()
    for text, child in value.items():
        if text == ".":
            out.add(prefix)
            continue
        path = (*prefix, _parse_element(text))
        if not child:
            out.add(path)
        else:
            out |= from_fields_v1(child, path)
    return out


# -- walking values --------------------------------------------------------------------------
@dataclass
class Comparison:
    added: FieldSet = field(default_factory=set)
    modified: FieldSet = field(default_factory=set)
    removed: FieldSet = field(default_factory=set)


class Walker:
    """Field sets, comparisons, merges and removals of values of one schema."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.types = Types(schema)

    # -- field_set (what a configuration sets) ---------------------------------------------
    def field_set(self, value: Any, shape: Shape, *, lenient: bool = False) -> FieldSet:
        """The paths a value sets. An undeclared field or a list item without its keys is a
        SchemaError naming its path, unless `lenient` (then it is left out)."""
        out: FieldSet = set()
        self._field_set(value, shape, (), out, lenient)
        return out

    def _field_set(
        self, value: Any, shape: Shape, path: Path, out: FieldSet, lenient: bool
    ) -> None:
        node = self.types.node(shape)
        if node.kind == "leaf" or node.atomic:
            out.add(path)
            return
        if node.kind == "list":
            if not isinstance(value, list):
                return
            assert node.element is not None
            for index, item in enumerate(value):
                try:
                    element = self.types.item_element(node, item, index)
                except SchemaError as exc:
                    if lenient:
                        continue
                    raise SchemaError(f"{path_text(path)}: {exc}") from None
                child = (*path, element)
                self._field_set(item, node.element, child, out, lenient)
                out.add(child)
            return
        if not isinstance(value, dict):
            return
        for key, item in value.items():
            child_shape = node.fields.get(key) if node.kind == "struct" else node.element
            child = (*path, ("f", key))
            if child_shape is None:
                if lenient:
                    continue
                raise SchemaError(f"{path_text(child)}: field not declared in schema")
            self._field_set(item, child_shape, child, out, lenient)
            if item is None or item == {} or node.kind == "map":
                out.add(child)

    # -- compare (what an update changed) ----------------------------------------------------
    def compare(self, old: Any, new: Any, shape: Shape) -> Comparison:
        result = Comparison()
        self._compare(old, new, shape, (), result)
        result.added.discard(())
        result.removed.discard(())
        result.modified.discard(())
        return result

    def _compare(self, old: Any, new: Any, shape: Shape, path: Path, out: Comparison) -> None:
        if old is MISSING or new is MISSING:
            # A whole subtree came or went: every node in it was added (or removed).
            if old is not new:
                self._subtree(
                    new if old is MISSING else old,
                    shape,
                    path,
                    out.added if old is MISSING else out.removed,
                )
            return
        if old == new:
            return  # nothing under an equal subtree changed (a C-speed deep comparison)
        node = self.types.node(shape)
        if node.kind == "leaf" or node.atomic:
            self._leaf(old, new, path, out)
            return
        if node.kind == "list":
            left = old if isinstance(old, list) else []
            right = new if isinstance(new, list) else []
            if not left and not right:
                self._leaf(old, new, path, out)
                return
            assert node.element is not None
            left_items = self._items(node, left)
            right_items = self._items(node, right)
            for element in {**left_items, **right_items}:
                self._compare(
                    left_items.get(element, MISSING),
                    right_items.get(element, MISSING),
                    node.element,
                    (*path, element),
                    out,
                )
        else:
            left_map = old if isinstance(old, dict) else {}
            right_map = new if isinstance(new, dict) else {}
            if not left_map and not right_map:
                self._leaf(old, new, path, out)
                return
            for key in {**left_map, **right_map}:
                child = node.fields.get(key) if node.kind == "struct" else node.element
                if child is None:
                    continue  # undeclared fields are pruned before they are stored
                before: Any = left_map.get(key, MISSING)
                after: Any = right_map.get(key, MISSING)
                if node.kind == "struct" and "$ref" not in child:
                    # Go's omitempty: an empty list or map field is not there at all.
                    before = MISSING if before == [] or before == {} else before
                    after = MISSING if after == [] or after == {} else after
                    if before is MISSING and after is MISSING:
                        continue
                self._compare(before, after, child, (*path, ("f", key)), out)
        if old is MISSING:
            out.added.add(path)
        elif new is MISSING:
            out.removed.add(path)

    def _subtree(self, value: Any, shape: Shape, path: Path, out: FieldSet) -> None:
        """Every path of `value` as `compare` finds them against nothing: the node itself and,
        unless it is a leaf or atomic, each of its items and fields (an empty list or map
        field of a struct counts as absent, as Go's omitempty drops it)."""
        node = self.types.node(shape)
        out.add(path)
        if node.kind == "leaf" or node.atomic:
            return
        if node.kind == "list":
            if isinstance(value, list):
                assert node.element is not None
                for index, item in enumerate(value):
                    try:
                        element = self.types.item_element(node, item, index)
                    except SchemaError:
                        element = ("i", index)
                    self._subtree(item, node.element, (*path, element), out)
            return
        if not isinstance(value, dict):
            return
        struct = node.kind == "struct"
        for key, item in value.items():
            child = node.fields.get(key) if struct else node.element
            if child is None:
                continue
            if struct and "$ref" not in child and (item == [] or item == {}):
                continue
            self._subtree(item, child, (*path, ("f", key)), out)

    @staticmethod
    def _leaf(old: Any, new: Any, path: Path, out: Comparison) -> None:
        if old is MISSING:
            out.added.add(path)
        elif new is MISSING:
            out.removed.add(path)
        elif old != new:
            out.modified.add(path)

    def _items(self, node: _Node, items: list[Any]) -> dict[PathElement, Any]:
        found: dict[PathElement, Any] = {}
        for index, item in enumerate(items):
            try:
                element = self.types.item_element(node, item, index)
            except SchemaError:
                element = ("i", index)
            found.setdefault(element, item)
        return found

    # -- merge (an applied configuration over the live object) ------------------------------
    def merge(self, live: Any, config: Any, shape: Shape) -> Any:
        node = self.types.node(shape)
        if config is MISSING:
            return live
        if live is MISSING or node.kind == "leaf" or node.atomic:
            return config
        if node.kind == "list":
            if not isinstance(live, list) or not isinstance(config, list):
                return config
            return self._merge_list(node, live, config)
        if not isinstance(live, dict) or not isinstance(config, dict):
            return config
        out = dict(live)
        for key, item in config.items():
            child = node.fields.get(key) if node.kind == "struct" else node.element
            if child is None:
                out[key] = item
            elif item is None:
                out.pop(key, None)
            else:
                out[key] = self.merge(live.get(key, MISSING), item, child)
        return out

    def _merge_list(self, node: _Node, live: list[Any], config: list[Any]) -> list[Any]:
        assert node.element is not None
        left = self._items(node, live)
        right = self._items(node, config)
        left_order, right_order = list(left), list(right)
        shared = [e for e in right_order if e in left]
        next_shared = shared.pop(0) if shared else None
        emitted: set[PathElement] = set()
        out: list[Any] = []
        li = ri = 0
        while li < len(left_order) or ri < len(right_order):
            if li < len(left_order) and ri < len(right_order):
                element = left_order[li]
                if element == right_order[ri]:
                    emitted.add(element)
                    out.append(self.merge(left[element], right[element], node.element))
                    li += 1
                    ri += 1
                    next_shared = shared.pop(0) if shared else None
                    continue
                if element in right and next_shared is not None and next_shared != element:
                    li += 1
                    continue
            if li < len(left_order):
                element = left_order[li]
                if element not in right:
                    out.append(left[element])
                    li += 1
                    continue
                if element in emitted:
                    li += 1
            if ri < len(right_order):
                element = right_order[ri]
                emitted.add(element)
                out.append(self.merge(left.get(element, MISSING), right[element], node.element))
                ri += 1
                if next_shared == element:
                    next_shared = shared.pop(0) if shared else None
        return out

    # -- removal (what an applier gave up) ------------------------------------------------
    def remove(self, value: Any, paths: FieldSet, shape: Shape, path: Path = ()) -> Any:
        """`value` without the nodes at `paths` (a removed node takes its subtree)."""
        if not paths:
            return value
        node = self.types.node(shape)
        if node.kind == "leaf" or node.atomic:
            return value
        if node.kind == "list" and isinstance(value, list):
            assert node.element is not None
            kept = []
            for index, item in enumerate(value):
                try:
                    element = self.types.item_element(node, item, index)
                except SchemaError:
                    element = ("i", index)
                child = (*path, element)
                if child in paths:
                    continue
                kept.append(self.remove(item, paths, node.element, child))
            return kept
        if isinstance(value, dict) and node.kind in ("struct", "map"):
            out = {}
            for key, item in value.items():
                child = (*path, ("f", key))
                if child in paths:
                    continue
                child_shape = node.fields.get(key) if node.kind == "struct" else node.element
                out[key] = self.remove(item, paths, child_shape, child) if child_shape else item
            return out
        return value

    # -- the zero object (what a create is compared against) ----------------------------------
    def zero(self, shape: Shape) -> Any:
        """The Go zero value of a struct as the unstructured converter writes it: non-pointer
        structs present (recursively), required lists and maps as null."""
        definition = self.schema.resolve(shape)
        if definition is None or not definition.is_object:
            return MISSING
        out: Obj = {}
        for key, prop in definition.properties.items():
            if prop.get("x-pointer"):
                continue
            inner = self.schema.resolve(prop)
            if inner is not None and inner.is_object:
                out[key] = self.zero(prop)
            elif key in definition.required and prop.get("type") in ("array", "object"):
                out[key] = None
        return out


# -- managers ---------------------------------------------------------------------------------
@dataclass
class Entry:
    """One managedFields entry, its field set decoded."""

    manager: str
    operation: str
    api_version: str
    time: str | None
    subresource: str
    fields: FieldSet

    @property
    def identity(self) -> tuple[str, str, str, str]:
        version = "" if self.operation == APPLY else self.api_version
        return (self.manager, self.operation, version, self.subresource)

    @staticmethod
    def identity_of(entry: Mapping[str, Any]) -> tuple[str, str, str, str]:
        """The identity of an entry in its JSON form."""
        operation = str(entry.get("operation", UPDATE))
        version = "" if operation == APPLY else str(entry.get("apiVersion", ""))
        return (
            str(entry.get("manager", "")),
            operation,
            version,
            str(entry.get("subresource", "")),
        )

    def describe(self) -> str:
        """The manager as upstream names it in a conflict."""
        text = json.dumps(self.manager)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource)}"
        if self.operation == UPDATE:
            text += f" using {self.api_version}"
        return text

    def to_json(self) -> Obj:
        out: Obj = {"manager": self.manager, "operation": self.operation}
        out["apiVersion"] = self.api_version
        if self.time is not None:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = to_fields_v1(self.fields)
        if self.subresource:
            out["subresource"] = self.subresource
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Entry:
        return cls(
            str(value.get("manager", "")),
            str(value.get("operation", UPDATE)),
            str(value.get("apiVersion", "")),
            value.get("time"),
            str(value.get("subresource", "")),
            from_fields_v1(value.get("fieldsV1") or {}),
        )


def _order(entries: Iterable[Obj]) -> list[Obj]:
    """managedFields in upstream's order: operation, time, manager, version, subresource."""

    def key(entry: Obj) -> tuple[str, str, str, str, str]:
        return (
            str(entry.get("operation", "")),
            str(entry.get("time") or ""),
            str(entry.get("manager", "")),
            str(entry.get("apiVersion", "")),
            str(entry.get("subresource", "")),
        )

    return sorted(entries, key=key)


# -- field sets edited in their fieldsV1 form ----------------------------------------------
def _tree_copy(tree: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _tree_copy(child) for key, child in tree.items()}


def _tree_has(tree: Mapping[str, Any], path: Path) -> bool:
    node: Mapping[str, Any] = tree
    for element in path:
        child = node.get(_element_text(element))
        if child is None:
            return False
        node = child
    return not node or "." in node


def _tree_add(tree: dict[str, Any], path: Path) -> None:
    node = tree
    for element in path:
        text = _element_text(element)
        child = node.get(text)
        if child is None:
            child = node[text] = {}
        elif child == {} and element is not path[-1]:
            child["."] = {}  # a member that now has children stays a member
        node = child
    if node:
        node["."] = {}


def _tree_remove(tree: dict[str, Any], path: Path) -> None:
    trail: list[tuple[dict[str, Any], str]] = []
    node = tree
    for element in path:
        text = _element_text(element)
        child = node.get(text)
        if child is None:
            return
        trail.append((node, text))
        node = child
    if len(node) > 1 or (node and "." not in node):
        node.pop(".", None)  # it stays a container of its members
    else:
        parent, text = trail.pop()
        del parent[text]
    while trail:  # containers left empty go too
        parent, text = trail.pop()
        child = parent[text]
        if child and child != {".": {}}:
            break
        if child == {".": {}}:
            parent[text] = {}  # only its own membership is left
            break
        del parent[text]


def _sorted_entries(entries: Iterable[Entry]) -> list[Obj]:
    def order(entry: Entry) -> tuple[str, str, str, str, str]:
        return (
            entry.operation,
            entry.time or "",
            entry.manager,
            entry.api_version,
            entry.subresource,
        )

    return [e.to_json() for e in sorted(entries, key=order) if e.fields]


def _format_time(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Request:
    """Who writes, how, and through which endpoint."""

    manager: str
    api_version: str
    subresource: str = ""
    status_subresource: bool = False  # the kind has one (its status is reset on the main)


class FieldManager:
    """Computes `metadata.managedFields` for every write and merges server-side applies."""

    def __init__(self, schema: Schema, now: Any) -> None:
        self.walker = Walker(schema)
        self.now = now

    def _owned(self, paths: FieldSet, request: Request) -> FieldSet:
        reset: tuple[str, ...] = ()
        if request.subresource == "status":
            reset = ("spec",)
        elif request.status_subresource:
            reset = ("status",)
        return {
            p
            for p in paths
            if p and p not in _STRIPPED and not (p[0][0] == "f" and p[0][1] in reset)
        }

    @staticmethod
    def entries(obj: Mapping[str, Any]) -> list[Entry]:
        managed = (obj.get("metadata") or {}).get("managedFields") or []
        return [Entry.from_json(e) for e in managed if isinstance(e, Mapping)]

    def update(self, old: Obj | None, new: Obj, shape: Shape, request: Request) -> list[Obj]:
        """The managedFields of `new` after an update (or a create, `old` None) by
        `request.manager`.

        Entries are edited in their `fieldsV1` form: only those that hold a path the update
        took or removed change, so a small patch of a large object stays cheap."""
        managed = [
            dict(e)
            for e in ((old or {}).get("metadata") or {}).get("managedFields") or []
            if isinstance(e, Mapping)
        ]
        before = self.walker.zero(shape) if old is None else old
        comparison = self.walker.compare(_unmanaged(before), _unmanaged(new), shape)
        taken = self._owned(comparison.added | comparison.modified, request)
        gone = taken | comparison.removed
        mine = Entry(request.manager, UPDATE, request.api_version, None, request.subresource, set())
        existing: dict[str, Any] | None = None
        for entry in managed:
            if Entry.identity_of(entry) == mine.identity:
                existing = entry
            if gone and any(_tree_has(entry.get("fieldsV1") or {}, p) for p in gone):
                tree = _tree_copy(entry.get("fieldsV1") or {})
                for path in gone:
                    _tree_remove(tree, path)
                entry["fieldsV1"] = tree
        if taken:
            if existing is None:
                existing = mine.to_json()
                managed.append(existing)
            tree = _tree_copy(existing.get("fieldsV1") or {})
            for path in taken:
                _tree_add(tree, path)
            existing["fieldsV1"] = tree
            existing["time"] = _format_time(self.now())
        return _order(e for e in managed if e.get("fieldsV1"))

    def apply(
        self,
        live: Obj | None,
        config: Obj,
        shape: Shape,
        request: Request,
        *,
        force: bool,
        name: str,
        namespace: str,
        gvk: str,
    ) -> Obj:
        """The live object with `config` applied, its managedFields set; 409 on conflicts."""
        try:
            applied = self._owned(self.walker.field_set(_unmanaged(config), shape), request)
        except SchemaError as exc:
            raise ApiError(
                500,
                "",
                f"failed to create typed patch object ({namespace}/{name}; {gvk}): {exc}",
            ) from exc
        entries = self.entries(live) if live is not None else []
        if live is not None and not entries:
            # An object nobody managed yet: its current fields belong to a stand-in manager.
            current = self._owned(
                self.walker.field_set(_unmanaged(live), shape, lenient=True), request
            )
            entries.append(
                Entry(BEFORE_FIRST_APPLY, UPDATE, request.api_version, None, "", current)
            )
        base = _unmanaged(live) if live is not None else {}
        merged: Obj = self.walker.merge(base, _unmanaged(config), shape)
        mine = Entry(request.manager, APPLY, request.api_version, None, request.subresource, set())
        previous = next((e for e in entries if e.identity == mine.identity), None)
        last = previous.fields if previous is not None else set()
        entries = [e for e in entries if e.identity != mine.identity]
        mine.fields = applied
        owned = set().union(applied, *(e.fields for e in entries))
        gone = {p for p in last - owned if not any(_under(o, p) for o in owned)}
        merged = self.walker.remove(merged, gone, shape)
        comparison = self.walker.compare(
            base if live is not None else self.walker.zero(shape), merged, shape
        )
        changed = comparison.added | comparison.modified
        conflicts = [(e, sorted(e.fields & changed, key=path_text)) for e in entries]
        conflicts = [(e, paths) for e, paths in conflicts if paths]
        if conflicts and not force:
            raise conflict_error(conflicts)
        for entry in entries:
            entry.fields -= changed
            entry.fields -= comparison.removed
        mine.time = _format_time(self.now())
        entries.append(mine)
        merged.setdefault("metadata", {})["managedFields"] = _sorted_entries(entries)
        return merged


def _under(path: Path, prefix: Path) -> bool:
    return len(path) > len(prefix) and path[: len(prefix)] == prefix


def _unmanaged(obj: Any) -> Any:
    """`obj` without metadata.managedFields (never part of what is compared or merged)."""
    if not isinstance(obj, dict) or "managedFields" not in (obj.get("metadata") or {}):
        return obj
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def conflict_error(conflicts: list[tuple[Entry, list[Path]]]) -> ApiError:
    """409 as upstream words an apply conflict (managers sorted, paths listed under each)."""
    total = sum(len(paths) for _, paths in conflicts)
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {entry.describe()}",
            "field": path_text(path),
        }
        for entry, paths in conflicts
        for path in paths
    ]
    if total == 1:
        entry, (path,) = conflicts[0]
        message = (
            f"Apply failed with 1 conflict: conflict with {entry.describe()}: {path_text(path)}"
        )
    else:
        lines = []
        for entry, paths in sorted(conflicts, key=lambda item: item[0].manager):
            lines.append(f"conflicts with {entry.describe()}:")
            lines += [f"- {path_text(p)}" for p in paths]
        message = f"Apply failed with {total} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, details={"causes": causes})


__all__ = [
    "APPLY",
    "UPDATE",
    "Entry",
    "FieldManager",
    "Request",
    "conflict_error",
    "from_fields_v1",
    "path_text",
    "to_fields_v1",
]
