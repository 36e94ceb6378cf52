"""Pure builders of the patches controllers send: nothing here does I/O.

Each builder returns a `Patch` (content type + JSON document). Objects the cache decoded
(a Node's `Taint`s, a Service's `LoadBalancerIngress`) are encoded by their own Struct,
with the API's field names and omissions, never written out by hand here; plain JSON
mappings are taken too (the public kit's callers build taints that way). Lists the API server would
merge oddly are written with JSON patches guarded by `test` operations, so a concurrent
change makes the write fail with 422 instead of silently losing someone else's update.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, cast

import msgspec

JSONValue = None | bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"]

MERGE: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
STRATEGIC: Final = "application/strategic-merge-patch+json"
PatchType = Literal[
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
]


@dataclass(frozen=True)
class Patch:
    content_type: PatchType
    document: JSONValue

    @property
    def empty(self) -> bool:
        return self.document in ({}, [], None)


def _guarded_replace(path: str, current: Sequence[JSONValue] | None, new: list[JSONValue]) -> Patch:
    """Replace the list at `path` only if it still holds `current`.

    An empty `current` means absent: the API server omits empty lists (omitempty), and a
    `test` for null passes on a missing member (json-patch v4, as upstream uses).
    """
    if not current:
        return Patch(
            JSON_PATCH,
            [
                {"op": "test", "path": path, "value": None},
                {"op": "add", "path": path, "value": new},
            ],
        )
    return Patch(
        JSON_PATCH,
        [
            {"op": "test", "path": path, "value": list(current)},
            {"op": "replace", "path": path, "value": new},
        ],
    )


def add_finalizer(current: Sequence[str] | None, finalizer: str) -> Patch:
    """Add `finalizer` if missing; guarded by the finalizers seen (empty patch if present)."""
    existing = list(current or ())
    if finalizer in existing:
        return Patch(JSON_PATCH, [])
    return _guarded_replace("/metadata/finalizers", current, [*existing, finalizer])


def remove_finalizer(current: Sequence[str] | None, finalizer: str) -> Patch:
    """Remove `finalizer`, guarded by the finalizers seen (empty patch if absent)."""
    existing = list(current or ())
    if finalizer not in existing:
        return Patch(JSON_PATCH, [])
    return _guarded_replace(
        "/metadata/finalizers", existing, [f for f in existing if f != finalizer]
    )


Encodable = Mapping[str, JSONValue] | msgspec.Struct
"""A JSON object, or a kube Struct that encodes to one (`Taint`, `LoadBalancerIngress`)."""


def encode(value: Encodable) -> dict[str, JSONValue]:
    """`value` as the JSON object the API server reads (a Struct by its own encoding)."""
    if isinstance(value, msgspec.Struct):
        return cast("dict[str, JSONValue]", msgspec.to_builtins(value))
    return dict(value)


def _taint_json(taint: Encodable) -> dict[str, JSONValue]:
    return {k: v for k, v in encode(taint).items() if v not in (None, "")}


def add_taint(current: Sequence[Encodable] | None, taint: Encodable) -> Patch:
    """Add a taint (key+effect unique, as the API requires), guarded by the taints seen."""
    existing = [_taint_json(t) for t in current or ()]
    wanted = _taint_json(taint)
    same = [
        t
        for t in existing
        if t.get("key") == wanted.get("key") and t.get("effect") == wanted.get("effect")
    ]
    if same == [wanted]:
        return Patch(JSON_PATCH, [])
    others = [t for t in existing if t not in same]
    new: list[JSONValue] = [*others, wanted]
    return _guarded_replace("/spec/taints", existing if current else None, new)


def remove_taint(current: Sequence[Encodable] | None, key: str, effect: str | None = None) -> Patch:
    """Remove taints with `key` (and `effect`, if given), guarded by the taints seen."""
    existing = [_taint_json(t) for t in current or ()]
    kept: list[JSONValue] = [
        t
        for t in existing
        if not (t.get("key") == key and (effect is None or t.get("effect") == effect))
    ]
    if len(kept) == len(existing):
        return Patch(JSON_PATCH, [])
    return _guarded_replace("/spec/taints", existing, kept)


def set_labels(labels: Mapping[str, str | None]) -> Patch:
    """Set (or, with None, remove) labels; other labels are left alone."""
    return Patch(MERGE, {"metadata": {"labels": dict(labels)}} if labels else {})


def set_annotations(annotations: Mapping[str, str | None]) -> Patch:
    return Patch(MERGE, {"metadata": {"annotations": dict(annotations)}} if annotations else {})


def set_provider_id(provider_id: str) -> Patch:
    return Patch(MERGE, {"spec": {"providerID": provider_id}})


def set_condition(condition: Mapping[str, JSONValue]) -> Patch:
    """A status condition, merged by `type` (send to the status subresource)."""
    return Patch(STRATEGIC, {"status": {"conditions": [dict(condition)]}})


def set_node_addresses(addresses: Iterable[Mapping[str, str]]) -> Patch:
    """Replace status.addresses whole (a strategic patch would merge them by type, which
    loses the second address of a type); send to nodes/status."""
    return Patch(MERGE, {"status": {"addresses": [dict(a) for a in addresses]}})


def set_load_balancer_status(ingress: Iterable[Encodable]) -> Patch:
    """Replace status.loadBalancer (send to services/status)."""
    listed: list[JSONValue] = [encode(i) for i in ingress]
    # An empty list would be merged away; null removes the ingress field itself.
    return Patch(MERGE, {"status": {"loadBalancer": {"ingress": listed or None}}})


def _pointer(token: str) -> str:
    """One JSON-pointer reference token (RFC 6901: `~` -> `~0`, `/` -> `~1`)."""
    return token.replace("~", "~0").replace("/", "~1")


def initialize_node(
    *,
    taints: Sequence[Encodable],
    remove_taint_key: str,
    provider_id: str | None,
    labels_seen: Mapping[str, str],
    labels: Mapping[str, str],
) -> Patch:
    """One JSON patch that finishes a Node's initialisation: providerID, labels, and the
    removal of every taint with `remove_taint_key`, guarded by the taints seen (so a taint
    someone added meanwhile is never lost: the patch then fails and is retried).
    """
    ops: list[JSONValue] = []
    existing = [_taint_json(t) for t in taints]
    kept: list[JSONValue] = [t for t in existing if t.get("key") != remove_taint_key]
    if len(kept) != len(existing):
        ops += [
            {"op": "test", "path": "/spec/taints", "value": list(existing)},
            {"op": "replace", "path": "/spec/taints", "value": kept},
        ]
    if provider_id:
        ops.append({"op": "add", "path": "/spec/providerID", "value": provider_id})
    if labels:
        if not labels_seen:
            ops += [
                {"op": "test", "path": "/metadata/labels", "value": None},
                {"op": "add", "path": "/metadata/labels", "value": dict(labels)},
            ]
        else:
            ops += [
                {"op": "add", "path": f"/metadata/labels/{_pointer(k)}", "value": v}
                for k, v in labels.items()
            ]
    return Patch(JSON_PATCH, ops)


def set_pod_cidrs(cidrs: Sequence[str], *, uid: str = "") -> Patch:
    """Assign a Node's pod CIDRs: spec.podCIDR (the first) and spec.podCIDRs, only if it has
    none yet and, with `uid`, is still that Node. A JSON patch whose `test`s make the write
    fail with 422 when someone assigned CIDRs first or the Node was re-registered, where
    upstream's strategic merge would merge two lists (and be refused for another reason).
    """
    if not cidrs:
        raise ValueError("set_pod_cidrs: give at least one CIDR")
    ops: list[JSONValue] = []
    if uid:
        ops.append({"op": "test", "path": "/metadata/uid", "value": uid})
    ops += [
        {"op": "test", "path": "/spec/podCIDRs", "value": None},
        {"op": "add", "path": "/spec/podCIDR", "value": cidrs[0]},
        {"op": "add", "path": "/spec/podCIDRs", "value": list(cidrs)},
    ]
    return Patch(JSON_PATCH, ops)
