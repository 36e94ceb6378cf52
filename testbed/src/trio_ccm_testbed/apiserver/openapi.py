"""The OpenAPI documents kubectl reads, both derived from the one schema table.

- `/openapi/v2` (and the legacy `/swagger-2.0.0.pb-v1`): one Swagger 2.0 document for every
  served kind, in JSON, or in protobuf (gnostic's `openapi_v2.Document`) when the client
  asks for `application/com.github.proto-openapi.spec.v2@v1.0+protobuf` as kubectl
  1.27/1.28 do before they validate a manifest.
- `/openapi/v3`: an index of one OpenAPI 3.0 document per group-version, each with the
  paths of that group-version and every schema they reach (`kubectl explain`, and kubectl
  1.29+'s check that the server validates fields itself).

Schemas carry upstream's descriptions, types, formats, enums, required lists and the
`x-kubernetes-*` extensions (list and map types, merge keys, group-version-kind); the
table's own bookkeeping (`x-proto`, `x-pointer`, ...) never leaves this module. Every
operation that writes takes `dryRun`, `fieldManager` and `fieldValidation` (and a patch
`force`), which is how kubectl learns that the server validates fields itself.

The documents depend only on the served kinds, which never change after the server is
built, so each is computed once (on first use) per `OpenApi`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec
import yaml

from trio_ccm_testbed.apiserver.kinds import ResourceType, ReviewType
from trio_ccm_testbed.apiserver.protobuf import encode_field
from trio_ccm_testbed.apiserver.schema import Schema, Shape

Obj = dict[str, Any]
AnyType = ResourceType | ReviewType

V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
V2_PROTOBUF_RESPONSE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_PRIVATE = ("x-proto", "x-pointer", "x-proto-wrapped", "x-v3-one-of", "x-inline")
_WRITE_PARAMS = ("dryRun", "fieldManager", "fieldValidation")
_PARAM_TEXT = {
    "dryRun": "When present, indicates that modifications should not be persisted. An invalid "
    "or unrecognized dryRun directive will result in an error response and no further "
    "processing of the request. Valid values are: - All: all dry run stages will be processed",
    "fieldManager": "fieldManager is a name associated with the actor or entity that is "
    "making these changes. The value must be less than or 128 characters long, and only "
    "contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.",
    "fieldValidation": "fieldValidation instructs the server on how to handle objects in the "
    "request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - "
    "Ignore: This will ignore any unknown fields that are silently dropped from the object, "
    "and will ignore all but the last duplicate field that the decoder encounters. This is "
    "the default behavior prior to v1.23. - Warn: This will send a warning via the standard "
    "warning response header for each unknown field that is dropped from the object, and for "
    "each duplicate field that is encountered. The request will still succeed if there are no "
    "other errors, and will only persist the last of any duplicate fields. This is the "
    "default in v1.23+ - Strict: This will fail the request with a BadRequest error if any "
    "unknown fields would be dropped from the object, or if any duplicate fields are present. "
    "The error returned from the server will contain all unknown and duplicate fields "
    "encountered.",
    "force": 'Force is going to "force" Apply requests. It means user will re-acquire '
    "conflicting fields owned by other people. Force flag must be unset for non-apply patch "
    "requests.",
}
_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _gvk(rtype: AnyType, kind: str | None = None) -> Obj:
    return {"group": rtype.group, "kind": kind or rtype.kind, "version": rtype.version}


class OpenApi:
    """The OpenAPI v2 and v3 documents of one server's served kinds."""

    def __init__(self, schema: Schema, types: Sequence[AnyType], *, version: str) -> None:
        self.schema = schema
        self.types = list(types)
        self.version = version
        self._v2: Obj | None = None
        self._v2_protobuf: bytes | None = None
        self._v3: dict[str, Obj] = {}

    # -- schemas --------------------------------------------------------------------------
    def _definition_name(self, rtype: AnyType, kind: str | None = None) -> str | None:
        found = self.schema.for_kind(rtype.group, rtype.version, kind or rtype.kind)
        return found.name if found is not None else None

    def _closure(self, roots: Iterable[str]) -> list[str]:
        """The definitions `roots` reach through references (inline embeds are flattened)."""
        seen: dict[str, None] = {}
        stack = list(roots)
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen[name] = None
            definition = self.schema[name]
            for shape in definition.properties.values():
                stack += _refs(shape)
        return sorted(seen)

    def _schema(self, name: str, *, v3: bool) -> Obj:
        definition = self.schema[name]
        raw = definition.raw
        out: Obj = {}
        if definition.description:
            out["description"] = definition.description
        if definition.is_object:
            out["properties"] = {
                key: self._property(shape, v3=v3)
                for key, shape in sorted(definition.properties.items())
            }
            if definition.required:
                out["required"] = list(definition.required)
            out["type"] = "object"
        elif v3 and "x-v3-one-of" in raw:
            if "format" in raw:
                out["format"] = raw["format"]
            out["oneOf"] = [{"type": kind} for kind in raw["x-v3-one-of"]]
        else:
            for key in ("format", "type"):
                if key in raw:
                    out[key] = raw[key]
        for key, value in raw.items():
            if key.startswith("x-kubernetes") or key == "x-kubernetes-group-version-kind":
                out[key] = value
        return out

    def _property(self, shape: Shape, *, v3: bool) -> Obj:
        out: Obj = {}
        for key, value in shape.items():
            if key in _PRIVATE:
                continue
            if key == "$ref":
                continue
            if key == "items" or key == "additionalProperties":
                out[key] = self._property(value, v3=v3)
            else:
                out[key] = value
        ref = shape.get("$ref")
        if ref is not None:
            target = ("#/components/schemas/" if v3 else "#/definitions/") + ref
            if not v3:
                out["$ref"] = target
            elif out or not shape.get("x-pointer"):
                # v3 cannot give a reference siblings: upstream wraps it in allOf.
                out["allOf"] = [{"$ref": target}]
                if not shape.get("x-pointer") and self.schema[ref].is_object:
                    out["default"] = {}
            else:
                out["$ref"] = target
        return dict(sorted(out.items()))

    # -- paths ----------------------------------------------------------------------------
    def _operations(self, rtype: AnyType) -> list[tuple[str, str, str, str | None, str]]:
        """(path, method, action, schema of the body or None, response schema) of a kind."""
        base = "/" + _gv_path(rtype.group, rtype.version)
        prefix = f"{base}/namespaces/{{namespace}}" if rtype.namespaced else base
        collection = f"{prefix}/{rtype.plural}"
        kind = self._definition_name(rtype) or ""
        if isinstance(rtype, ReviewType):
            return [(collection, "post", "post", kind, kind)]
        listed = self._definition_name(rtype, f"{rtype.kind}List") or kind
        status = _META + "Status"
        out = [
            (collection, "get", "list", None, listed),
            (collection, "post", "post", kind, kind),
            (collection, "delete", "deletecollection", _META + "DeleteOptions", status),
            (f"{collection}/{{name}}", "get", "get", None, kind),
            (f"{collection}/{{name}}", "put", "put", kind, kind),
            (f"{collection}/{{name}}", "patch", "patch", _META + "Patch", kind),
            (f"{collection}/{{name}}", "delete", "delete", _META + "DeleteOptions", status),
        ]
        if rtype.namespaced:
            out.append((f"{base}/{rtype.plural}", "get", "list", None, listed))
        for sub in rtype.subresources:
            path = f"{collection}/{{name}}/{sub}"
            if sub == "status":
                out += [
                    (path, "get", "get", None, kind),
                    (path, "put", "put", kind, kind),
                    (path, "patch", "patch", _META + "Patch", kind),
                ]
            elif sub == "token":
                request = "io.k8s.api.authentication.v1.TokenRequest"
                out.append((path, "post", "post", request, request))
            elif sub == "scale":
                scale = "io.k8s.api.autoscaling.v1.Scale"
                out += [
                    (path, "get", "get", None, scale),
                    (path, "put", "put", scale, scale),
                    (path, "patch", "patch", _META + "Patch", scale),
                ]
        return out

    def _sub_kind(self, path: str, rtype: AnyType) -> Obj:
        if path.endswith("/token"):
            return {"group": "authentication.k8s.io", "kind": "TokenRequest", "version": "v1"}
        if path.endswith("/scale"):
            return {"group": "autoscaling", "kind": "Scale", "version": "v1"}
        return _gvk(rtype)

    def _parameters(self, method: str, path: str, *, v3: bool) -> list[Obj]:
        names: list[str] = []
        if method in ("post", "put", "patch"):
            names += _WRITE_PARAMS
        if method == "patch":
            names.append("force")
        params: list[Obj] = []
        for name in ("name", "namespace"):
            if "{" + name + "}" in path:
                param = {"name": name, "in": "path", "required": True, "uniqueItems": True}
                params.append(_typed(param, "string", v3=v3))
        for name in names:
            param = {"name": name, "in": "query", "uniqueItems": True}
            param["description"] = _PARAM_TEXT[name]
            params.append(_typed(param, "boolean" if name == "force" else "string", v3=v3))
        return params

    def _paths(self, members: Iterable[AnyType], *, v3: bool) -> tuple[Obj, set[str]]:
        paths: Obj = {}
        used: set[str] = set()
        for rtype in members:
            for path, method, action, body, response in self._operations(rtype):
                if not response:
                    continue
                used.add(response)
                operation: Obj = {
                    "description": f"{action} {rtype.kind}",
                    "operationId": f"{action}{rtype.kind}{path.count('{')}",
                    "parameters": self._parameters(method, path, v3=v3),
                    "tags": [_gv_path(rtype.group, rtype.version).replace("/", "_")],
                    "x-kubernetes-action": action,
                    "x-kubernetes-group-version-kind": self._sub_kind(path, rtype),
                }
                ref = ("#/components/schemas/" if v3 else "#/definitions/") + response
                ok_code = "201" if method == "post" else "200"
                if v3:
                    content = {"application/json": {"schema": {"$ref": ref}}}
                    operation["responses"] = {
                        ok_code: {"description": "OK", "content": content},
                        "401": {"description": "Unauthorized"},
                    }
                else:
                    operation["responses"] = {
                        ok_code: {"description": "OK", "schema": {"$ref": ref}},
                        "401": {"description": "Unauthorized"},
                    }
                    operation["produces"] = ["application/json", "application/yaml"]
                    operation["schemes"] = ["https"]
                if body is not None:
                    used.add(body)
                    body_ref = ("#/components/schemas/" if v3 else "#/definitions/") + body
                    consumes = _PATCH_TYPES if method == "patch" else ("*/*",)
                    if v3:
                        operation["requestBody"] = {
                            "content": {c: {"schema": {"$ref": body_ref}} for c in consumes},
                            "required": True,
                        }
                    else:
                        operation["consumes"] = list(consumes)
                        operation["parameters"].insert(
                            0,
                            {
                                "in": "body",
                                "name": "body",
                                "required": True,
                                "schema": {"$ref": body_ref},
                            },
                        )
                paths.setdefault(path, {})[method] = operation
        return dict(sorted(paths.items())), used

    # -- the documents ----------------------------------------------------------------------
    def v2(self) -> Obj:
        """The Swagger 2.0 document of every served kind."""
        if self._v2 is None:
            paths, used = self._paths(self.types, v3=False)
            self._v2 = {
                "swagger": "2.0",
                "info": {"title": "Kubernetes", "version": self.version},
                "paths": paths,
                "definitions": {name: self._schema(name, v3=False) for name in self._closure(used)},
                "securityDefinitions": {
                    "BearerToken": {
                        "description": "Bearer Token authentication",
                        "in": "header",
                        "name": "authorization",
                        "type": "apiKey",
                    }
                },
                "security": [{"BearerToken": []}],
            }
        return self._v2

    def v2_protobuf(self) -> bytes:
        """The v2 document as gnostic's openapi_v2.Document protobuf message."""
        if self._v2_protobuf is None:
            self._v2_protobuf = _message("Document", self.v2())
        return self._v2_protobuf

    def _group_versions(self) -> dict[tuple[str, str], list[AnyType]]:
        found: dict[tuple[str, str], list[AnyType]] = {}
        for rtype in self.types:
            found.setdefault((rtype.group, rtype.version), []).append(rtype)
        return found

    def v3(self, group: str, version: str) -> Obj | None:
        """The OpenAPI 3.0 document of one group-version (None if none is served)."""
        key = f"{group}/{version}"
        if key not in self._v3:
            members = self._group_versions().get((group, version))
            if not members:
                return None
            paths, used = self._paths(members, v3=True)
            self._v3[key] = {
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": self.version},
                "paths": paths,
                "components": {
                    "schemas": {name: self._schema(name, v3=True) for name in self._closure(used)},
                    "securitySchemes": {
                        "BearerToken": {
                            "description": "Bearer Token authentication",
                            "in": "header",
                            "name": "authorization",
                            "type": "apiKey",
                        }
                    },
                },
            }
        return self._v3[key]

    def v3_index(self) -> Obj:
        paths = {}
        for group, version in self._group_versions():
            document = self.v3(group, version)
            digest = hashlib.sha512(msgspec.json.encode(document)).hexdigest()[:32].upper()
            path = _gv_path(group, version)
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
        return {"paths": dict(sorted(paths.items()))}


def _typed(param: Obj, kind: str, *, v3: bool) -> Obj:
    if v3:
        param["schema"] = {"type": kind, "uniqueItems": True}
        param.pop("uniqueItems", None)
    else:
        param["type"] = kind
    return param


def _refs(shape: Shape) -> list[str]:
    found = []
    if "$ref" in shape:
        found.append(shape["$ref"])
    for key in ("items", "additionalProperties"):
        if key in shape:
            found += _refs(shape[key])
    return found


# -- gnostic's openapi_v2 protobuf ------------------------------------------------------
# Field numbers of gnostic-models' openapiv2/OpenAPIv2.proto (transcribed). A field is
# (number, kind): "s" string, "b" bool, "rs" repeated string, a message name, "r:Name" a
# repeated message. "*" maps every other key to a named entry message; "x-" is where the
# message keeps its vendor extensions.
_GNOSTIC: dict[str, dict[str, Any]] = {
    "Document": {
        "swagger": (1, "s"),
        "info": (2, "Info"),
        "host": (3, "s"),
        "basePath": (4, "s"),
        "schemes": (5, "rs"),
        "consumes": (6, "rs"),
        "produces": (7, "rs"),
        "paths": (8, "Paths"),
        "definitions": (9, "Definitions"),
        "security": (12, "r:SecurityRequirement"),
        "securityDefinitions": (13, "SecurityDefinitions"),
        "x-": 16,
    },
    "Info": {"title": (1, "s"), "version": (2, "s"), "description": (3, "s"), "x-": 7},
    "Paths": {"x-": 1, "*": (2, "PathItem")},
    "PathItem": {
        "get": (2, "Operation"),
        "put": (3, "Operation"),
        "post": (4, "Operation"),
        "delete": (5, "Operation"),
        "options": (6, "Operation"),
        "head": (7, "Operation"),
        "patch": (8, "Operation"),
        "parameters": (9, "r:ParametersItem"),
        "x-": 10,
    },
    "Operation": {
        "tags": (1, "rs"),
        "summary": (2, "s"),
        "description": (3, "s"),
        "operationId": (5, "s"),
        "produces": (6, "rs"),
        "consumes": (7, "rs"),
        "parameters": (8, "r:ParametersItem"),
        "responses": (9, "Responses"),
        "schemes": (10, "rs"),
        "deprecated": (11, "b"),
        "x-": 13,
    },
    "BodyParameter": {
        "description": (1, "s"),
        "name": (2, "s"),
        "in": (3, "s"),
        "required": (4, "b"),
        "schema": (5, "Schema"),
        "x-": 6,
    },
    "QueryParameterSubSchema": {
        "required": (1, "b"),
        "in": (2, "s"),
        "description": (3, "s"),
        "name": (4, "s"),
        "allowEmptyValue": (5, "b"),
        "type": (6, "s"),
        "format": (7, "s"),
        "uniqueItems": (20, "b"),
        "x-": 23,
    },
    "PathParameterSubSchema": {
        "required": (1, "b"),
        "in": (2, "s"),
        "description": (3, "s"),
        "name": (4, "s"),
        "type": (5, "s"),
        "format": (6, "s"),
        "uniqueItems": (19, "b"),
        "x-": 22,
    },
    "Responses": {"*": (1, "ResponseValue"), "x-": 2},
    "Response": {"description": (1, "s"), "schema": (2, "SchemaItem"), "x-": 5},
    "Definitions": {"*": (1, "Schema")},
    "Properties": {"*": (1, "Schema")},
    "Schema": {
        "$ref": (1, "s"),
        "format": (2, "s"),
        "title": (3, "s"),
        "description": (4, "s"),
        "default": (5, "Any"),
        "required": (19, "rs"),
        "enum": (20, "r:Any"),
        "additionalProperties": (21, "AdditionalPropertiesItem"),
        "type": (22, "TypeItem"),
        "items": (23, "ItemsItem"),
        "allOf": (24, "r:Schema"),
        "properties": (25, "Properties"),
        "readOnly": (27, "b"),
        "x-": 31,
    },
    "SecurityDefinitions": {"*": (1, "SecurityDefinitionsItem")},
    "ApiKeySecurity": {"type": (1, "s"), "name": (2, "s"), "in": (3, "s"), "description": (4, "s")},
    "SecurityRequirement": {"*": (1, "StringArray")},
}


def _message(name: str, value: Any) -> bytes:
    """Encode a JSON value as the gnostic message `name`."""
    if name == "Any":  # Any {yaml = 2}: the value written as YAML
        text = yaml.safe_dump(value, default_flow_style=True, width=1 << 20).strip()
        return encode_field(2, text.removesuffix("\n..."))
    if name == "TypeItem":
        return b"".join(encode_field(1, v) for v in ([value] if isinstance(value, str) else value))
    if name == "ItemsItem":
        return encode_field(1, _message("Schema", value))
    if name == "StringArray":
        return b"".join(encode_field(1, v) for v in value)
    if name == "SchemaItem":
        return encode_field(1, _message("Schema", value))
    if name == "ResponseValue":
        return encode_field(1, _message("Response", value))
    if name == "AdditionalPropertiesItem":
        if isinstance(value, bool):
            return encode_field(2, value)
        return encode_field(1, _message("Schema", value))
    if name == "SecurityDefinitionsItem":
        return encode_field(2, _message("ApiKeySecurity", value))
    if name == "ParametersItem":
        return encode_field(1, _parameter(value))
    table = _GNOSTIC[name]
    out = bytearray()
    extensions: list[tuple[str, Any]] = []
    for key, item in value.items():
        if key.startswith("x-") and "x-" in table:
            extensions.append((key, item))
            continue
        spec = table.get(key)
        if spec is None and "*" in table:
            number, entry = table["*"]
            named = encode_field(1, key) + encode_field(2, _message(entry, item))
            out += encode_field(number, named)
            continue
        if spec is None:
            continue  # a key gnostic has no field for
        number, kind = spec
        if kind == "s":
            out += encode_field(number, str(item))
        elif kind == "b":
            out += encode_field(number, bool(item))
        elif kind == "rs":
            for text in item:
                out += encode_field(number, str(text))
        elif kind.startswith("r:"):
            for element in item:
                out += encode_field(number, _message(kind[2:], element))
        else:
            out += encode_field(number, _message(kind, item))
    for key, item in extensions:
        named = encode_field(1, key) + encode_field(2, _message("Any", item))
        out += encode_field(table["x-"], named)
    return bytes(out)


def _parameter(value: Mapping[str, Any]) -> bytes:
    """Parameter {body_parameter = 1 | non_body_parameter = 2 {query = 3, path = 4}}."""
    where = value.get("in")
    if where == "body":
        return encode_field(1, _message("BodyParameter", value))
    if where == "path":
        inner = encode_field(4, _message("PathParameterSubSchema", value))
    else:
        inner = encode_field(3, _message("QueryParameterSubSchema", value))
    return encode_field(2, inner)
