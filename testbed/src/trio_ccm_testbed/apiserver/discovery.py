"""Discovery: /api, /apis and the group-version lists, in legacy and aggregated form.

Aggregated discovery echoes the version the client asked for (v2, or v2beta1 for kubectl
1.27-1.29, which fail on a v2 answer); the OpenAPI documents are `openapi.py`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trio_ccm_testbed.apiserver.kinds import ResourceType, ReviewType

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


# Subresources whose objects are of another kind: (kind, group, version, verbs).
_FOREIGN_SUBRESOURCES = {
    "token": ("TokenRequest", "authentication.k8s.io", "v1", ["create"]),
    "scale": ("Scale", "autoscaling", "v1", ["get", "patch", "update"]),
}


def _subresources(rtype: AnyType) -> list[tuple[str, str, list[str], Obj]]:
    """(name, kind, verbs, group and version) of each subresource."""
    if not isinstance(rtype, ResourceType):
        return []
    out = []
    for sub in rtype.subresources:
        if sub in _FOREIGN_SUBRESOURCES:
            kind, group, version, verbs = _FOREIGN_SUBRESOURCES[sub]
            out.append((sub, kind, verbs, {"group": group, "version": version}))
        else:
            out.append((sub, rtype.kind, ["get", "patch", "update"], {}))
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
                            "group": rtype.group,
                            "version": rtype.version,
                            **foreign,
                            "kind": kind,
                        },
                        "verbs": verbs,
                    }
                    for name, kind, verbs, foreign in _subresources(rtype)
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
        for name, kind, verbs, foreign in _subresources(rtype):
            resources.append(
                {
                    "name": f"{rtype.plural}/{name}",
                    "singularName": "",
                    "namespaced": rtype.namespaced,
                    **foreign,
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
