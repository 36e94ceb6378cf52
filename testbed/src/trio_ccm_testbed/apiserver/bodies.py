"""Request bodies and the options that govern them: decoding, field validation, dry runs.

A body is decoded from JSON (also without a Content-Type: the official Python client sends
none), YAML or, for creates and updates, protobuf. Field validation follows upstream's
strict decoding (KEP 2885, `fieldValidation` on create, update and patch):

- `Strict`: unknown and duplicate fields are a 400 naming each one;
- `Warn` (the default): each is a `Warning` header (`299 - "unknown field \\"spec.x\\""`)
  and the object is stored without the unknown fields;
- `Ignore`: the unknown fields are dropped without a word.

The problems come in upstream's order: for a created or updated object, as they appear in
the body (a field both unknown and repeated counts as unknown only); for a patch, first the
patch's own repeated fields in order, then the unknown fields of the patched object sorted
by path; a YAML body's repeated keys are named by line, as Go's YAML decoder names them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import yaml

from trio_ccm_testbed.apiserver import errors
from trio_ccm_testbed.apiserver import fielderrors as fe
from trio_ccm_testbed.apiserver.errors import ApiError
from trio_ccm_testbed.apiserver.protobuf import PROTOBUF_TYPE, Decoder, ProtobufError
from trio_ccm_testbed.apiserver.schema import Schema, Shape

JSON_TYPE = "application/json"
YAML_TYPE = "application/yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
APPLY_PATCH_CBOR = "application/apply-patch+cbor"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, APPLY_PATCH)
OBJECT_TYPES = (JSON_TYPE, YAML_TYPE, PROTOBUF_TYPE)

STRICT, WARN, IGNORE = "Strict", "Warn", "Ignore"
_VALIDATIONS = ("", IGNORE, STRICT, WARN)  # sorted, as upstream lists them
_JSON_PATCH_KEYS = ("op", "path", "value", "from")


@dataclass(frozen=True)
class Options:
    """The query options of a write (CreateOptions, UpdateOptions, PatchOptions, ...)."""

    dry_run: bool = False
    field_validation: str = WARN
    field_manager: str = ""
    force: bool = False


def parse_options(query: Mapping[str, list[str]], kind: str, *, apply: bool = False) -> Options:
    """The options of a write, validated as upstream's Validate{Create,Update,Patch}Options
    do: an error is 422 naming `<kind>.meta.k8s.io` (kind: CreateOptions, UpdateOptions,
    PatchOptions or DeleteOptions)."""
    errs: list[fe.FieldError] = []
    manager = (query.get("fieldManager") or [""])[-1]
    force_values = query.get("force") or []
    if kind == "PatchOptions":
        if not apply and force_values:
            errs.append(fe.forbidden("force", "may not be specified for non-apply patch"))
        if apply and not manager:
            errs.append(fe.required("fieldManager", "is required for apply patch"))
    if len(manager) > 128:
        errs.append(fe.too_long("fieldManager", manager, 128))
    elif any(not char.isprintable() for char in manager):
        errs.append(fe.invalid("fieldManager", manager, "must only contain printable characters"))
    dry_run = list(query.get("dryRun", []))
    if any(value != "All" for value in dry_run):
        errs.append(fe.not_supported("dryRun", dry_run, ("All",)))
    validation = (query.get("fieldValidation") or [""])[-1]
    if validation not in _VALIDATIONS:
        errs.append(fe.not_supported("fieldValidation", validation, _VALIDATIONS))
    if errs:
        raise errors.invalid(kind, "meta.k8s.io", "", errs)
    return Options(
        dry_run=bool(dry_run),
        field_validation=validation or WARN,
        field_manager=manager,
        force=(force_values or [""])[-1].lower() == "true",
    )


def default_manager(user_agent: str) -> str:
    """The field manager of a request that names none: its User-Agent up to the first "/"
    (upstream's prefixFromUserAgent), printable characters only, at most 128."""
    prefix = user_agent.split("/", 1)[0]
    return "".join(char for char in prefix if char.isprintable())[:128]


# -- decoding ----------------------------------------------------------------------------
@dataclass
class Decoded:
    """A decoded body, plus what strict decoding found in its text."""

    content_type: str
    value: Any
    # For JSON: the document as nested (key, value) pair lists, to find repeated keys.
    pairs: Any = None
    yaml_duplicates: list[str] = field(default_factory=list)


def media_type(header: str) -> str:
    return header.split(";")[0].strip().lower()


def decode(
    body: bytes,
    content_type: str,
    *,
    accepted: Sequence[str],
    decoder: Decoder,
    keep_pairs: bool,
) -> Decoded:
    """Decode a body of `content_type` (415 unless it is one of `accepted`; 400 if it does
    not decode). `keep_pairs` keeps what strict decoding needs (repeated keys)."""
    if content_type not in ("", "*/*", *accepted):
        raise errors.unsupported_media_type(content_type or "<none>", accepted)
    try:
        if content_type == PROTOBUF_TYPE:
            return Decoded(content_type, decoder.decode_envelope(body))
        if content_type in (YAML_TYPE, APPLY_PATCH):
            text = body.decode()
            value, duplicates = _yaml_with_duplicates(text) if keep_pairs else (None, [])
            if not keep_pairs:
                value = yaml.safe_load(text)
            return Decoded(content_type, value, yaml_duplicates=duplicates)
        value = msgspec.json.decode(body)
        pairs = json.loads(body, object_pairs_hook=_Pairs) if keep_pairs else None
        return Decoded(content_type, value, pairs)
    except ProtobufError as exc:
        raise errors.bad_request(
            f"the body of the request could not be decoded as protobuf: {exc}"
        ) from exc
    except (msgspec.DecodeError, json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as exc:
        form = "YAML" if content_type in (YAML_TYPE, APPLY_PATCH) else "JSON"
        raise errors.bad_request(
            f"the body of the request could not be decoded as {form}: {exc}"
        ) from exc


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its (key, value) pairs, repeated keys included."""


class _DuplicateKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of repeated keys silently; this loader also notes them."""

    duplicates: list[str]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                line = key_node.start_mark.line + 1
                self.duplicates.append(f'line {line}: key "{key}" already set in map')
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_with_duplicates(text: str) -> tuple[Any, list[str]]:
    loader = _DuplicateKeyLoader(text)
    loader.duplicates = []
    try:
        value = loader.get_single_data()
    finally:
        loader.dispose()
    return value, sorted(set(loader.duplicates), key=lambda t: int(t.split()[1][:-1]))


# -- strict decoding ---------------------------------------------------------------------
def problems_in_order(schema: Schema, pairs: Any, shape: Shape, path: str = "") -> list[str]:
    """Unknown and repeated fields of a created or updated object, in body order."""
    found: list[str] = []
    _walk_pairs(schema, pairs, shape, path, found)
    return found


def _walk_pairs(schema: Schema, value: Any, shape: Shape | None, path: str, out: list[str]) -> None:
    # Hot on every strict write: a field's path is spelled out only where it is reported or
    # where the walk goes on below it (objects and lists), not for each scalar.
    if isinstance(value, _Pairs):
        definition = schema.resolve(shape) if shape is not None else None
        element = shape.get("additionalProperties") if shape is not None else None
        properties = (
            definition.properties if definition is not None and definition.is_object else None
        )
        seen: set[str] = set()
        for key, item in value:
            child: Shape | None = None
            if properties is not None:
                child = properties.get(key)
                if child is None:
                    if key not in seen:
                        out.append(f'unknown field "{f"{path}.{key}" if path else key}"')
                    seen.add(key)
                    continue
            elif element is not None:
                child = element
            if key in seen:
                out.append(f'duplicate field "{f"{path}.{key}" if path else key}"')
            seen.add(key)
            if isinstance(item, list):
                _walk_pairs(schema, item, child, f"{path}.{key}" if path else key, out)
    elif isinstance(value, list) and shape is not None and shape.get("type") == "array":
        items = shape["items"]
        for i, item in enumerate(value):
            if isinstance(item, list):
                _walk_pairs(schema, item, items, f"{path}[{i}]", out)


def duplicates_in(pairs: Any, path: str = "") -> list[str]:
    """Every repeated key of a document (a patch), in order."""
    found: list[str] = []
    if isinstance(pairs, _Pairs):
        seen: set[str] = set()
        for key, item in pairs:
            where = f"{path}.{key}" if path else key
            if key in seen:
                found.append(f'duplicate field "{where}"')
            seen.add(key)
            found += duplicates_in(item, where)
    elif isinstance(pairs, list):
        for i, item in enumerate(pairs):
            found += duplicates_in(item, f"{path}[{i}]")
    return found


def json_patch_problems(pairs: Any) -> list[str]:
    """Unknown and repeated keys of a JSON patch's operations (`json patch ... "[0].foo"`)."""
    found: list[str] = []
    for i, operation in enumerate(pairs if isinstance(pairs, list) else []):
        if not isinstance(operation, _Pairs):
            continue
        seen: set[str] = set()
        for key, _ in operation:
            if key not in _JSON_PATCH_KEYS:
                found.append(f'json patch unknown field "[{i}].{key}"')
            elif key in seen:
                found.append(f'json patch duplicate field "[{i}].{key}"')
            seen.add(key)
    return found


def unknown_sorted(schema: Schema, value: Any, shape: Shape, *, within: Any = None) -> list[str]:
    """Unknown fields of an object sorted by path (a patched object is re-encoded with its
    keys sorted before upstream decodes it); `within`: only where a merge patch wrote."""
    if within is not None:
        found = schema.unknown_fields(value, shape, within=within)
    else:
        found = schema.unknown_fields(_sorted(value), shape)
    return [f'unknown field "{p}"' for p in found]


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


@dataclass
class Validation:
    """What field validation found in one request: problems are added as they are found
    (a patch's own, then its result's) and settled once: Strict raises them all together,
    Warn keeps them as warnings, Ignore forgets them."""

    mode: str
    warnings: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)

    def add(self, problems: Iterable[str]) -> None:
        if self.mode != IGNORE:
            self.pending += problems

    def settle(self, *, kind: str, version: str, apply: bool = False) -> None:
        found, self.pending = self.pending, []
        if not found:
            return
        if self.mode == STRICT:
            raise strict_error(found, kind=kind, version=version, apply=apply)
        for problem in found:
            if problem not in self.warnings:
                self.warnings.append(problem)


def strict_error(problems: list[str], *, kind: str, version: str, apply: bool) -> ApiError:
    yaml_lines = [p for p in problems if p.startswith("line ")]
    rest = [p for p in problems if not p.startswith("line ")]
    if apply:
        return errors.bad_request(
            "error strict decoding YAML: error converting YAML to JSON: yaml: unmarshal "
            "errors:\n  " + "\n  ".join(yaml_lines)
        )
    parts = []
    if yaml_lines:
        parts.append("yaml: unmarshal errors:\n  " + "\n  ".join(yaml_lines))
    parts += rest
    return errors.bad_request(
        f'{kind} in version "{version}" cannot be handled as a {kind}: strict decoding error: '
        + ", ".join(parts)
    )


def warning_header(text: str) -> tuple[str, str]:
    """A `Warning` header as upstream writes it: code 299, agent "-", a quoted text."""
    return ("warning", "299 - " + json.dumps(text, ensure_ascii=False))
