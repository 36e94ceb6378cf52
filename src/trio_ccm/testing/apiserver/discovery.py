"""Discovery (/api, /apis, legacy and aggregated) and the OpenAPI v3 documents kubectl reads."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from trio_ccm.testing.apiserver.kinds import ResourceType, ReviewType
from trio_ccm.testing.apiserver.store import encode

Obj = dict[str, Any]
AnyType = ResourceType | ReviewType

_AGGREGATED = "application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList"


def aggregated_version(accept: str) -> str | None:
    """The aggregated-discovery version the client asked for (v2 first), or None for legacy.

    kubectl 1.27-1.29 ask for v2beta1 only and fail on a v2 answer, so echo what was asked.
    """
    offered = [part.strip().replace(" ", "") for part in accept.split(",")]
    for version in ("v2", "v2beta1"):
        for media in offered:
            params = set(media.split(";")[1:])
            if {"g=apidiscovery.k8s.io", f"v={version}", "as=APIGroupDiscoveryList"} <= params:
                return version
    return None


def aggregated_content_type(version: str) -> str:
    return _AGGREGATED.format(v=version)


def _verbs(rtype: AnyType) -> list[str]:
    return list(rtype.verbs) if isinstance(rtype, ResourceType) else ["create"]


def _subresources(rtype: AnyType) -> list[tuple[str, str, list[str]]]:
    """(name, kind, verbs) of each subresource."""
    if not isinstance(rtype, ResourceType):
        return []
    out = []
    for sub in rtype.subresources:
        if sub == "token":
            out.append((sub, "TokenRequest", ["create"]))
        else:
            out.append((sub, rtype.kind, ["get", "patch", "update"]))
    return out


def _names(rtype: AnyType) -> Obj:
    """shortNames and categories, where the kind has them."""
    names: Obj = {}
    if isinstance(rtype, ResourceType):
        if rtype.short_names:
            names["shortNames"] = list(rtype.short_names)
        if rtype.categories:
            names["categories"] = list(rtype.categories)
    return names


def _response_group(rtype: AnyType, kind: str) -> Obj:
    """Legacy discovery names the group/version of a subresource of another group."""
    if kind == "TokenRequest":
        return {"group": "authentication.k8s.io", "version": "v1"}
    return {}


def _group_versions(types: Sequence[AnyType]) -> dict[str, dict[str, list[AnyType]]]:
    groups: dict[str, dict[str, list[AnyType]]] = {}
    for rtype in types:
        groups.setdefault(rtype.group, {}).setdefault(rtype.version, []).append(rtype)
    return groups


def aggregated(types: Sequence[AnyType], *, core: bool, version: str) -> Obj:
    items = []
    for group, versions in sorted(_group_versions(types).items()):
        if (group == "") != core:
            continue
        entries = []
        for ver, members in versions.items():
            resources = []
            for rtype in sorted(members, key=lambda t: t.plural):
                entry: Obj = {
                    "resource": rtype.plural,
                    "responseKind": {
                        "group": rtype.group,
                        "version": rtype.version,
                        "kind": rtype.kind,
                    },
                    "scope": "Namespaced" if rtype.namespaced else "Cluster",
                    "singularResource": rtype.singular,
                    "verbs": _verbs(rtype),
                }
                entry.update(_names(rtype))
                subs = [
                    {
                        "subresource": name,
                        "responseKind": {
                            "group": "authentication.k8s.io"
                            if kind == "TokenRequest"
                            else rtype.group,
                            "version": rtype.version,
                            "kind": kind,
                        },
                        "verbs": verbs,
                    }
                    for name, kind, verbs in _subresources(rtype)
                ]
                if subs:
                    entry["subresources"] = subs
                resources.append(entry)
            entries.append({"version": ver, "resources": resources, "freshness": "Current"})
        items.append({"metadata": {"name": group, "creationTimestamp": None}, "versions": entries})
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": f"apidiscovery.k8s.io/{version}",
        "metadata": {},
        "items": items,
    }


def api_versions(host: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
    }


def _group_entry(group: str, versions: dict[str, list[AnyType]]) -> Obj:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": listed, "preferredVersion": listed[0]}


def api_group_list(types: Sequence[AnyType]) -> Obj:
    groups = [_group_entry(g, vs) for g, vs in sorted(_group_versions(types).items()) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(types: Sequence[AnyType], group: str) -> Obj | None:
    versions = _group_versions(types).get(group)
    if not group or versions is None:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(group, versions)}


def api_resource_list(types: Sequence[AnyType], group: str, version: str) -> Obj | None:
    members = _group_versions(types).get(group, {}).get(version)
    if not members:
        return None
    resources = []
    for rtype in sorted(members, key=lambda t: t.plural):
        entry: Obj = {
            "name": rtype.plural,
            "singularName": rtype.singular,
            "namespaced": rtype.namespaced,
            "kind": rtype.kind,
            "verbs": _verbs(rtype),
        }
        entry.update(_names(rtype))
        resources.append(entry)
        for name, kind, verbs in _subresources(rtype):
            resources.append(
                {
                    "name": f"{rtype.plural}/{name}",
                    "singularName": "",
                    "namespaced": rtype.namespaced,
                    **_response_group(rtype, kind),
                    "kind": kind,
                    "verbs": verbs,
                }
            )
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


# -- OpenAPI v3 --------------------------------------------------------------------------
def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation")


def openapi_document(types: Sequence[AnyType], group: str, version: str) -> Obj | None:
    """A small but well-formed OpenAPI v3 document for one group-version.

    kubectl (1.29+) reads it to learn that the server takes `fieldValidation`; the schemas
    are deliberately open objects (see docs/emulator.md for what this leaves out).
    """
    members = _group_versions(types).get(group, {}).get(version)
    if not members:
        return None
    paths: Obj = {}
    schemas: Obj = {}
    base = "/" + _gv_path(group, version)
    for rtype in members:
        gvk = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
        schema_name = f"io.k8s.emulated.{rtype.group or 'core'}.{rtype.version}.{rtype.kind}"
        schemas[schema_name] = {
            "type": "object",
            "x-kubernetes-group-version-kind": [gvk],
            "additionalProperties": True,
        }
        ref = {"$ref": f"#/components/schemas/{schema_name}"}
        params = [{"name": p, "in": "query", "schema": {"type": "string"}} for p in _QUERY_PARAMS]
        ok = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}
        prefix = f"{base}/namespaces/{{namespace}}" if rtype.namespaced else base
        collection = f"{prefix}/{rtype.plural}"

        def op(
            action: str, parameters: list[Obj] | None = None, gvk: Obj = gvk, ok: Obj = ok
        ) -> Obj:
            body: Obj = {
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
                "responses": ok,
            }
            if parameters:
                body["parameters"] = parameters
            return body

        if isinstance(rtype, ReviewType):
            paths[collection] = {"post": op("post", params)}
            continue
        paths[collection] = {"get": op("list"), "post": op("post", params)}
        paths[f"{collection}/{{name}}"] = {
            "get": op("get"),
            "put": op("put", params),
            "patch": op("patch", params),
            "delete": op("delete"),
        }
        for sub, _, _ in _subresources(rtype):
            if sub == "status":
                paths[f"{collection}/{{name}}/status"] = {
                    "get": op("get"),
                    "put": op("put", params),
                    "patch": op("patch", params),
                }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (trio-ccm emulator)", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def openapi_index(types: Sequence[AnyType]) -> Obj:
    paths = {}
    for group, versions in _group_versions(types).items():
        for version in versions:
            document = openapi_document(types, group, version)
            digest = hashlib.sha512(encode(document)).hexdigest()[:32].upper()
            path = _gv_path(group, version)
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": dict(sorted(paths.items()))}
