"""The emulator's patch engine: JSON merge patch, JSON patch and strategic merge patch.

All three functions take plain JSON values (dict/list/str/int/float/bool/None), never
mutate their inputs, and return freshly built documents that share nothing with either
input, so callers may mutate the result freely.

Fidelity notes (what the real kube-apiserver does, and where we deliberately differ):

* ``application/json-patch+json`` is applied by kube-apiserver with
  ``gopkg.in/evanphx/json-patch.v4``. We reproduce that library's observable behaviour,
  including its deviations from RFC 6902: ``replace`` of a missing *object member* adds it,
  ``test`` with ``"value": null`` passes when the member is missing, ``copy`` from a missing
  object member copies ``null``, negative array indices count from the end, and ``add`` at
  the root path ``""`` fails. The error texts below were read from evanphx/json-patch's v4
  ``patch.go`` (the release series with ``github.com/pkg/errors`` wrapping, whose
  ``Wrapf(cause, msg)`` renders as ``"msg: cause"``). Where v4 has no error at all we raise
  with a message in the same style and say so next to the code.
* kube-apiserver answers 400 only when the JSON patch document cannot be decoded and 422
  for every apply failure, including an unknown ``op``. Per this module's contract, a
  document whose operations lack a valid ``op``/``path``/``from``/``value`` is a
  :class:`MalformedPatchError` (400) instead.
* Strategic merge patch follows k8s.io/apimachinery ``pkg/util/strategicpatch`` with the
  simplifications this emulator's contract asks for: merge lists may be keyed on several
  fields with defaults, merged elements keep the target's order and new ones are appended
  (upstream re-sorts them), ``$setElementOrder`` puts the listed items first and keeps the
  rest after them, and a map carrying ``$patch: delete`` removes the key (upstream leaves
  ``{}``).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "MalformedPatchError",
    "MergeList",
    "PatchApplyError",
    "PatchError",
    "PatchSchema",
    "json_merge_patch",
    "json_patch",
    "strategic_merge_patch",
]


class PatchError(Exception):
    """Base of the patch errors; ``message`` is the text for the API ``Status.message``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class MalformedPatchError(PatchError):
    """The patch document cannot be understood; the server answers 400 BadRequest."""


class PatchApplyError(PatchError):
    """A well-formed patch that cannot be applied to this object; the server answers 422."""


# --------------------------------------------------------------------------- helpers


def _copy(value: Any) -> Any:
    """Deep-copy a JSON value (much cheaper than ``copy.deepcopy`` for plain JSON)."""
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def _canon(value: Any) -> Hashable:
    """A hashable form of a JSON value under JSON equality.

    Numbers compare by value (``1 == 1.0``) but never equal booleans, which Python's own
    ``==`` would conflate (``True == 1``).
    """
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(_canon(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, _canon(item)) for key, item in value.items()))
    return ("other", repr(value))


def _json_equal(left: Any, right: Any) -> bool:
    return _canon(left) == _canon(right)


def _go_json_type(value: Any) -> str:
    """The JSON type name Go's encoding/json uses in ``cannot unmarshal X`` errors."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _go_fmt(value: Any) -> str:
    """Render a JSON value roughly as Go's ``fmt`` ``%v`` renders decoded JSON."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, list):
        return "[" + " ".join(_go_fmt(item) for item in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{key}:{_go_fmt(value[key])}" for key in sorted(value)) + "]"
    return str(value)


# ------------------------------------------------------------------ RFC 7386 merge patch


def json_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (application/merge-patch+json).

    ``null`` deletes a key; a non-object patch replaces the target.
    """
    return _merge_patch_owned(_copy(target), patch)


def _merge_patch_owned(target: Any, patch: Any) -> Any:
    """RFC 7386 ``MergePatch`` on a target this module owns (and may therefore mutate)."""
    if not isinstance(patch, dict):
        return _copy(patch)
    result = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch_owned(result.get(key), value)
    return result


# ------------------------------------------------------------------ RFC 6902 JSON patch

_OPERATIONS: Final = frozenset({"add", "remove", "replace", "move", "copy", "test"})
# Go's strconv.Atoi accepts an optional sign and ASCII decimal digits, nothing else.
_ATOI: Final = re.compile(r"[+-]?[0-9]+")
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


class _ContainerError(Exception):
    """An error from a container primitive, re-wrapped by the operation that hit it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _decode_token(token: str) -> str:
    # RFC 6901 section 4: "~1" becomes "/" first, then "~0" becomes "~".
    return token.replace("~1", "/").replace("~0", "~")


def _atoi(text: str) -> int:
    quoted = json.dumps(text, ensure_ascii=False)
    if not _ATOI.fullmatch(text):
        raise _ContainerError(f"strconv.Atoi: parsing {quoted}: invalid syntax")
    number = int(text)
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise _ContainerError(f"strconv.Atoi: parsing {quoted}: value out of range")
    return number


def _invalid_index(index: int) -> _ContainerError:
    # v4: errors.Wrapf(ErrInvalidIndex, "Unable to access invalid index: %d", idx)
    return _ContainerError(f"Unable to access invalid index: {index}: invalid index referenced")


def _list_position(items: list[Any], key: str) -> int:
    """Index of an existing element, as v4's ``partialArray.get`` resolves it."""
    index = _atoi(key)
    if index < 0:
        if index < -len(items):
            raise _invalid_index(index)
        index += len(items)
    if index >= len(items):
        raise _invalid_index(index)
    return index


def _get(container: Any, key: str) -> Any:
    """v4 ``get``: a missing object member reads as ``None``, exactly like a JSON null."""
    if isinstance(container, dict):
        return container.get(key)
    return container[_list_position(container, key)]


def _add(container: Any, key: str, value: Any) -> None:
    if isinstance(container, dict):
        container[key] = value
        return
    if key == "-":
        container.append(value)
        return
    try:
        index = _atoi(key)
    except _ContainerError as exc:
        raise _ContainerError(
            f"value was not a proper array index: '{key}': {exc.message}"
        ) from None
    size = len(container) + 1
    if index >= size:
        raise _invalid_index(index)
    if index < 0:
        if index < -size:
            raise _invalid_index(index)
        index += size
    container.insert(index, value)


def _remove(container: Any, key: str) -> None:
    if isinstance(container, dict):
        if key not in container:
            raise _ContainerError(f"Unable to remove nonexistent key: {key}: missing value")
        del container[key]
        return
    index = _atoi(key)
    if index >= len(container):
        raise _invalid_index(index)
    if index < 0:
        if index < -len(container):
            raise _invalid_index(index)
        index += len(container)
    del container[index]


def _set(container: Any, key: str, value: Any) -> None:
    """v4 ``set``: only reached after ``_get`` has proved an array index valid."""
    if isinstance(container, dict):
        container[key] = value
    else:
        container[_list_position(container, key)] = value


def _find(doc: Any, path: str) -> tuple[Any, str] | None:
    """v4 ``findObject``: the container holding the last token, and that token."""
    tokens = path.split("/")
    if len(tokens) < 2:
        return None
    container = doc
    for raw in tokens[1:-1]:
        try:
            child = _get(container, _decode_token(raw))
        except _ContainerError:
            return None
        if not isinstance(child, dict | list):
            return None
        container = child
    return container, _decode_token(tokens[-1])


def _missing_field_message(operation: dict[str, Any], name: str) -> str | None:
    """Why ``operation[name]`` is not a usable JSON pointer, in v4's words, or None."""
    value = operation.get(name)
    if value is None:
        if name == "path":
            return "operation missing path field: missing value"
        return "operation, missing from field: missing value"
    if not isinstance(value, str):
        return f"json: cannot unmarshal {_go_json_type(value)} into Go value of type string"
    return None


def _validate_operations(operations: Any) -> list[dict[str, Any]]:
    """Check the document shape; everything wrong here is a 400 (MalformedPatchError)."""
    if not isinstance(operations, list):
        raise MalformedPatchError(
            f"json: cannot unmarshal {_go_json_type(operations)} "
            "into Go value of type jsonpatch.Patch"
        )
    checked: list[dict[str, Any]] = []
    for operation in operations:
        if operation is not None and not isinstance(operation, dict):
            raise MalformedPatchError(
                f"json: cannot unmarshal {_go_json_type(operation)} "
                "into Go value of type jsonpatch.Operation"
            )
        kind = operation.get("op") if operation is not None else None
        if not isinstance(kind, str) or kind not in _OPERATIONS:
            # v4's Operation.Kind() reads an absent or non-string op as "unknown" and
            # Apply reports fmt.Errorf("Unexpected kind: %s") (which upstream sends as 422).
            shown = kind if isinstance(kind, str) else "unknown"
            raise MalformedPatchError(f"Unexpected kind: {shown}")
        assert operation is not None
        names = ("from", "path") if kind in {"move", "copy"} else ("path",)
        for name in names:
            problem = _missing_field_message(operation, name)
            if problem is not None:
                # v4 wraps ErrMissing itself for add/remove/copy paths and the underlying
                # decode error for everything else (confirmed in v4 patch.go).
                if name == "path" and kind in {"add", "remove", "copy"}:
                    raise MalformedPatchError(
                        f"{kind} operation failed to decode path: missing value"
                    )
                raise MalformedPatchError(f"{kind} operation failed to decode {name}: {problem}")
            pointer = operation[name]
            if pointer and not pointer.startswith("/"):
                # v4 silently treats "a/b" as "/b"; an RFC 6901 pointer must start with "/".
                raise MalformedPatchError(
                    f'{kind} operation has an invalid JSON pointer in "{name}": '
                    f'"{pointer}" (must be empty or start with "/")'
                )
        if kind in {"add", "replace", "test"} and "value" not in operation:
            # v4 would add null here (or panic for test); RFC 6902 requires the member.
            raise MalformedPatchError(f"{kind} operation is missing its value field")
        checked.append(operation)
    return checked


def _apply_add(doc: Any, operation: dict[str, Any]) -> Any:
    path: str = operation["path"]
    found = _find(doc, path)
    if found is None:
        raise PatchApplyError(
            f'add operation does not apply: doc is missing path: "{path}": missing value'
        )
    container, key = found
    try:
        _add(container, key, _copy(operation["value"]))
    except _ContainerError as exc:
        raise PatchApplyError(f"error in add for path: '{path}': {exc.message}") from None
    return doc


def _apply_remove(doc: Any, operation: dict[str, Any]) -> Any:
    path: str = operation["path"]
    found = _find(doc, path)
    if found is None:
        raise PatchApplyError(
            f'remove operation does not apply: doc is missing path: "{path}": missing value'
        )
    container, key = found
    try:
        _remove(container, key)
    except _ContainerError as exc:
        raise PatchApplyError(f"error in remove for path: '{path}': {exc.message}") from None
    return doc


def _apply_replace(doc: Any, operation: dict[str, Any]) -> Any:
    path: str = operation["path"]
    value = operation["value"]
    if path == "":
        if not isinstance(value, dict | list):
            # v4 means to fail here but wraps a nil error, so it silently does nothing.
            raise PatchApplyError("replace operation value must be object or array")
        return _copy(value)
    found = _find(doc, path)
    if found is None:
        raise PatchApplyError(
            f"replace operation does not apply: doc is missing path: {path}: missing value"
        )
    container, key = found
    try:
        _get(container, key)
    except _ContainerError:
        raise PatchApplyError(
            f"replace operation does not apply: doc is missing key: {path}: missing value"
        ) from None
    # v4 quirk kept on purpose: a missing *object member* is simply added.
    _set(container, key, _copy(value))
    return doc


def _apply_move(doc: Any, operation: dict[str, Any]) -> Any:
    source: str = operation["from"]
    path: str = operation["path"]
    found = _find(doc, source)
    if found is None:
        raise PatchApplyError(
            f"move operation does not apply: doc is missing from path: {source}: missing value"
        )
    container, key = found
    try:
        value = _get(container, key)
        _remove(container, key)
    except _ContainerError as exc:
        # v4 names the last token here, not the whole path.
        raise PatchApplyError(f"error in move for path: '{key}': {exc.message}") from None
    found = _find(doc, path)
    if found is None:
        raise PatchApplyError(
            f"move operation does not apply: doc is missing destination path: {path}: missing value"
        )
    container, key = found
    try:
        _add(container, key, value)
    except _ContainerError as exc:
        raise PatchApplyError(f"error in move for path: '{path}': {exc.message}") from None
    return doc


def _apply_copy(doc: Any, operation: dict[str, Any]) -> Any:
    source: str = operation["from"]
    path: str = operation["path"]
    found = _find(doc, source)
    if found is None:
        raise PatchApplyError(
            f"copy operation does not apply: doc is missing from path: {source}: missing value"
        )
    container, key = found
    try:
        value = _get(container, key)  # v4: a missing object member copies as null
    except _ContainerError as exc:
        raise PatchApplyError(f"error in copy for from: '{source}': {exc.message}") from None
    found = _find(doc, path)
    if found is None:
        raise PatchApplyError(
            f"copy operation does not apply: doc is missing destination path: {path}: missing value"
        )
    container, key = found
    try:
        _add(container, key, _copy(value))
    except _ContainerError as exc:
        raise PatchApplyError(f"error while adding value during copy: {exc.message}") from None
    return doc


def _apply_test(doc: Any, operation: dict[str, Any]) -> Any:
    path: str = operation["path"]
    expected = operation["value"]
    # Confirmed v4 text: errors.Wrapf(ErrTestFailed, "testing value %s failed", path).
    failed = PatchApplyError(f"testing value {path} failed: test failed")
    if path == "":
        if not _json_equal(doc, expected):
            raise failed
        return doc
    found = _find(doc, path)
    if found is None:
        raise PatchApplyError(
            f"test operation does not apply: is missing path: {path}: missing value"
        )
    container, key = found
    try:
        actual = _get(container, key)
    except _ContainerError as exc:
        raise PatchApplyError(f"error in test for path: '{path}': {exc.message}") from None
    # v4 quirk: a missing member and a JSON null both read as "no value", and testing
    # either against null succeeds.
    if actual is None or expected is None:
        if actual is None and expected is None:
            return doc
        raise failed
    if not _json_equal(actual, expected):
        raise failed
    return doc


_APPLY: Final = {
    "add": _apply_add,
    "remove": _apply_remove,
    "replace": _apply_replace,
    "move": _apply_move,
    "copy": _apply_copy,
    "test": _apply_test,
}


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch (application/json-patch+json).

    Supports add, remove, replace, move, copy and test with RFC 6901 pointers (``~0``/``~1``
    escapes, ``-`` appends, array indices). Operations apply in order and atomically: on any
    error only the exception comes back and the target is untouched.
    """
    checked = _validate_operations(operations)
    if not isinstance(target, dict | list):
        raise PatchApplyError(
            f"json: cannot unmarshal {_go_json_type(target)} "
            "into Go value of type jsonpatch.partialDoc"
        )
    doc = _copy(target)
    for operation in checked:
        doc = _APPLY[operation["op"]](doc, operation)
    return doc


# ------------------------------------------------------------ strategic merge patch


@dataclass(frozen=True)
class MergeList:
    """How a strategic merge patch treats one list field.

    ``keys`` empty: a list of primitives merged as a set (union keeping order). Otherwise a
    list of objects merged by these key fields; ``defaults`` gives the value assumed for a
    key field an element lacks (e.g. ``protocol`` -> ``"TCP"``).
    """

    keys: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict, hash=False)


PatchSchema = Mapping[str, MergeList]
"""Merge lists by field path from the object root, dot-separated.

``[]`` after a list field name means "inside each element of this merge list", e.g.
``"metadata.finalizers"``, ``"status.conditions"``, ``"spec.containers"``,
``"spec.containers[].ports"``. Lists whose path is not in the schema are replaced
atomically (as Kubernetes does for lists without a patchStrategy). Maps always merge
recursively.
"""

_PATCH: Final = "$patch"
_RETAIN_KEYS: Final = "$retainKeys"
_DELETE_FROM_PRIMITIVE_LIST: Final = "$deleteFromPrimitiveList"
_SET_ELEMENT_ORDER: Final = "$setElementOrder"

# The texts of k8s.io/apimachinery/pkg/util/mergepatch's sentinel errors (confirmed).
_BAD_PRIMITIVE_LIST: Final = "invalid patch format of primitive list"
_BAD_RETAIN_KEYS: Final = "invalid patch format of retainKeys"
_BAD_SET_ELEMENT_ORDER: Final = "invalid patch format of setElementOrder list"


class _Drop(enum.Enum):
    """Result of merging a patch value that removes the field altogether."""

    FIELD = enum.auto()


def _child_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _directive_field(key: str, prefix: str, message: str) -> str:
    """The list field a ``$prefix/field`` directive key names (upstream ``extractKey``)."""
    head, slash, name = key.partition("/")
    if not slash or head != prefix:
        raise MalformedPatchError(message)
    return name


def _unknown_patch_type(directive: Any, where: Mapping[str, Any]) -> MalformedPatchError:
    # mergepatch.ErrBadPatchType: "unknown patch type: %s in map: %v"
    return MalformedPatchError(f"unknown patch type: {_go_fmt(directive)} in map: {_go_fmt(where)}")


def _dedupe(items: list[Any]) -> list[Any]:
    seen: set[Hashable] = set()
    unique: list[Any] = []
    for item in items:
        marker = _canon(item)
        if marker not in seen:
            seen.add(marker)
            unique.append(item)
    return unique


class _Strategic:
    """One strategic-merge application; every container it mutates is its own copy."""

    def __init__(self, schema: PatchSchema) -> None:
        self._schema = schema

    # -- identity of elements in keyed merge lists

    @staticmethod
    def _identity(element: Any, spec: MergeList) -> tuple[Hashable, ...] | None:
        """The merge-key tuple of a list element, or None if it cannot be matched."""
        if not isinstance(element, dict):
            return None
        parts: list[Hashable] = []
        for key in spec.keys:
            value = element.get(key)
            if value is None:
                if key not in spec.defaults:
                    return None
                value = spec.defaults[key]
            parts.append(_canon(value))
        return tuple(parts)

    @classmethod
    def _required_identity(cls, element: dict[str, Any], spec: MergeList) -> tuple[Hashable, ...]:
        identity = cls._identity(element, spec)
        if identity is None:
            missing = next(
                key for key in spec.keys if element.get(key) is None and key not in spec.defaults
            )
            # mergepatch.ErrNoMergeKey: "map: %v does not contain declared merge key: %s"
            raise MalformedPatchError(
                f"map: {_go_fmt(element)} does not contain declared merge key: {missing}"
            )
        return identity

    # -- values

    def merge_value(self, target: Any, patch: Any, path: str) -> Any:
        """Merge ``patch`` into ``target`` (owned; may be None/absent or another type)."""
        if patch is None:
            return _Drop.FIELD
        if isinstance(patch, dict):
            return self.merge_map(target if isinstance(target, dict) else {}, patch, path)
        if isinstance(patch, list):
            return self.merge_list(target if isinstance(target, list) else [], patch, path)
        return patch

    def _fresh_element(self, patch: Any, path: str) -> Any:
        """A patch list element as it lands in the result: copied, directives stripped."""
        if patch is None:
            return None
        return self.merge_value(None, patch, path)

    # -- maps

    def merge_map(self, target: dict[str, Any], patch: Mapping[str, Any], path: str) -> Any:
        """Merge a patch map into an owned target map; may return ``_Drop.FIELD``."""
        if _PATCH in patch:
            directive = patch[_PATCH]
            if directive == "replace":
                rest = {key: value for key, value in patch.items() if key != _PATCH}
                return self.merge_map({}, rest, path)
            if directive == "delete":
                return _Drop.FIELD
            raise _unknown_patch_type(directive, patch)

        if _RETAIN_KEYS in patch:
            self._retain_keys(target, patch)

        deletions: list[tuple[str, list[Any]]] = []
        orders: list[tuple[str, list[Any]]] = []
        for key, value in patch.items():
            if key == _RETAIN_KEYS:
                continue
            if key.startswith(_SET_ELEMENT_ORDER):
                name = _directive_field(key, _SET_ELEMENT_ORDER, _BAD_SET_ELEMENT_ORDER)
                if not isinstance(value, list):
                    raise MalformedPatchError(_BAD_SET_ELEMENT_ORDER)
                orders.append((name, value))
                continue
            if key.startswith(_DELETE_FROM_PRIMITIVE_LIST):
                name = _directive_field(key, _DELETE_FROM_PRIMITIVE_LIST, _BAD_PRIMITIVE_LIST)
                if not isinstance(value, list):
                    raise MalformedPatchError(_BAD_PRIMITIVE_LIST)
                deletions.append((name, value))
                continue
            merged = self.merge_value(target.get(key), value, _child_path(path, key))
            if merged is _Drop.FIELD:
                target.pop(key, None)
            else:
                target[key] = merged

        # Upstream removes parallel-list values after merging the list (that is the order
        # it uses whenever $setElementOrder is present too); removal keeps relative order.
        for name, values in deletions:
            current = target.get(name)
            if isinstance(current, list):
                unwanted = {_canon(value) for value in values}
                target[name] = [item for item in current if _canon(item) not in unwanted]
        for name, order in orders:
            current = target.get(name)
            if isinstance(current, list):
                target[name] = self._apply_order(current, order, _child_path(path, name))
        return target

    @staticmethod
    def _retain_keys(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
        retain = patch[_RETAIN_KEYS]
        if not isinstance(retain, list):
            raise MalformedPatchError(_BAD_RETAIN_KEYS)
        keep = {name for name in retain if isinstance(name, str)}
        # Upstream rejects a patch that sets a field its own $retainKeys would clear.
        for key, value in patch.items():
            if (
                value is None
                or key == _RETAIN_KEYS
                or key.startswith((_DELETE_FROM_PRIMITIVE_LIST, _SET_ELEMENT_ORDER))
            ):
                continue
            if key not in keep:
                raise MalformedPatchError(_BAD_RETAIN_KEYS)
        for key in [key for key in target if key not in keep]:
            del target[key]

    # -- lists

    def merge_list(self, target: list[Any], patch: list[Any], path: str) -> list[Any]:
        """Merge a patch list into an owned target list according to the schema."""
        spec = self._schema.get(path)
        element_path = f"{path}[]"
        replace = False
        deletes: list[dict[str, Any]] = []
        items: list[Any] = []
        for element in patch:
            if isinstance(element, dict) and _PATCH in element:
                directive = element[_PATCH]
                if directive == "replace":
                    replace = True
                elif directive == "delete":
                    deletes.append(element)
                elif directive == "merge":
                    raise MalformedPatchError("merging lists cannot yet be specified in the patch")
                else:
                    raise _unknown_patch_type(directive, element)
            else:
                items.append(element)

        if spec is None or replace:
            # Atomic list, or `$patch: replace`: the patch's own elements are the new list
            # (a delete directive has nothing left to delete).
            return [self._fresh_element(element, element_path) for element in items]
        if not spec.keys:
            if deletes:
                raise MalformedPatchError(
                    f"$patch: delete needs a list merged by key, but {path} is a list of "
                    "primitives; use $deleteFromPrimitiveList"
                )
            fresh = [self._fresh_element(element, element_path) for element in items]
            return _dedupe(target + fresh)
        return self._merge_keyed(target, deletes, items, spec, element_path)

    def _merge_keyed(
        self,
        target: list[Any],
        deletes: list[dict[str, Any]],
        items: list[Any],
        spec: MergeList,
        element_path: str,
    ) -> list[Any]:
        result = list(target)
        for directive in deletes:
            doomed = self._required_identity(directive, spec)
            result = [element for element in result if self._identity(element, spec) != doomed]
        for element in items:
            if not isinstance(element, dict):
                # mergepatch.ErrBadArgType, as Go prints the two types.
                raise MalformedPatchError(
                    f"expected a map[string]interface {{}}, but received a {_go_json_type(element)}"
                )
            identity = self._required_identity(element, spec)
            for index, existing in enumerate(result):
                if self._identity(existing, spec) == identity:
                    result[index] = self.merge_map(existing, element, element_path)
                    break
            else:
                result.append(self.merge_map({}, element, element_path))
        return result

    def _apply_order(self, current: list[Any], order: list[Any], path: str) -> list[Any]:
        """Put the elements ``order`` names first, in its order; the rest keep theirs after."""
        spec = self._schema.get(path)
        rank: dict[Hashable, int] = {}
        identities: list[Hashable | None]
        if spec is not None and spec.keys:
            for position, entry in enumerate(order):
                if not isinstance(entry, dict):
                    raise MalformedPatchError(_BAD_SET_ELEMENT_ORDER)
                rank.setdefault(self._required_identity(entry, spec), position)
            identities = [self._identity(element, spec) for element in current]
        else:
            for position, entry in enumerate(order):
                rank.setdefault(_canon(entry), position)
            identities = [_canon(element) for element in current]
        ranked: list[tuple[int, Any]] = []
        rest: list[Any] = []
        for identity, element in zip(identities, current, strict=True):
            if identity is not None and identity in rank:
                ranked.append((rank[identity], element))
            else:
                rest.append(element)
        ranked.sort(key=lambda pair: pair[0])  # stable: equal ranks keep their order
        return [element for _, element in ranked] + rest


def strategic_merge_patch(target: Any, patch: Any, schema: PatchSchema) -> Any:
    """Kubernetes strategic merge patch (application/strategic-merge-patch+json).

    Maps merge recursively and ``null`` deletes a key; lists named in ``schema`` merge (by
    value for primitives, by key fields for objects); every other list is replaced. The
    ``$patch``, ``$retainKeys``, ``$deleteFromPrimitiveList/<field>`` and
    ``$setElementOrder/<field>`` directives are honoured and never appear in the result.
    """
    if not isinstance(patch, dict):
        raise MalformedPatchError(
            f"json: cannot unmarshal {_go_json_type(patch)} "
            "into Go value of type map[string]interface {}"
        )
    base = _copy(target) if isinstance(target, dict) else {}
    result = _Strategic(schema).merge_map(base, patch, "")
    # `{"$patch": "delete"}` at the root empties the object, as upstream returns {}.
    return {} if result is _Drop.FIELD else result
