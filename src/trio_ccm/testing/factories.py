"""Objects as their owners write them, for tests: Nodes as a kubelet registers them
(`--cloud-provider=external`), Services as a user applies them, Leases as an elector holds
them. Each returns a plain JSON document (`dict`) to create through the emulator
(`ApiServer.create`) or any client; keyword arguments tweak the usual fields.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Final

from trio_ccm.cloud.provider import ServiceInfo, default_load_balancer_name

__all__ = [
    "TAINT_UNINITIALIZED",
    "lb_name",
    "make_lease",
    "make_node",
    "make_service",
    "ready_condition",
]

TAINT_UNINITIALIZED: Final = "node.cloudprovider.kubernetes.io/uninitialized"
_STAMP: Final = "2026-11-21T10:00:00Z"


def ready_condition(status: str = "True", *, stamp: str = _STAMP) -> dict[str, str]:
    """A Node's Ready condition as a kubelet (True) or the node lifecycle (Unknown/False)
    writes it."""
    return {
        "type": "Ready",
        "status": status,
        "reason": "KubeletReady" if status == "True" else "NodeStatusUnknown",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


def make_node(
    name: str,
    *,
    ready: str = "True",
    uninitialized: bool = True,
    taints: Sequence[Mapping[str, str]] | None = None,
    provider_id: str = "",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    addresses: Sequence[Mapping[str, str]] | None = None,
    pod_cidrs: Sequence[str] = (),
) -> dict[str, Any]:
    """A Node as a kubelet with `--cloud-provider=external` registers it: the uninitialized
    taint (unless `uninitialized=False` or `taints` says otherwise), the hostname label and
    address, a Ready condition (`ready`: True, False or Unknown)."""
    if taints is None:
        taints = (
            [{"key": TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]
            if uninitialized
            else []
        )
    spec: dict[str, Any] = {"taints": [dict(t) for t in taints]}
    if provider_id:
        spec["providerID"] = provider_id
    if pod_cidrs:
        spec["podCIDR"] = pod_cidrs[0]
        spec["podCIDRs"] = list(pod_cidrs)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
        "status": {
            "conditions": [ready_condition(ready)],
            "addresses": (
                [{"type": "Hostname", "address": name}]
                if addresses is None
                else [dict(a) for a in addresses]
            ),
        },
    }


def make_service(
    name: str,
    *,
    namespace: str = "default",
    type: str = "LoadBalancer",
    ports: Sequence[Mapping[str, Any]] | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Service as a user applies it: `type` LoadBalancer and one port 80/TCP unless told
    otherwise; any other `spec` field by its JSON name (`loadBalancerSourceRanges=[...]`,
    `externalTrafficPolicy="Local"`)."""
    body: dict[str, Any] = {
        "type": type,
        "selector": {"app": name},
        "ports": [dict(p) for p in ports]
        if ports is not None
        else [{"name": "http", "port": 80, "protocol": "TCP"}],
    }
    body.update(spec)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": body}


def make_lease(
    holder: str = "",
    *,
    name: str = "cloud-controller-manager",
    namespace: str = "kube-system",
    lease_duration_s: int = 15,
    renewed: dt.datetime | None = None,
    transitions: int = 0,
) -> dict[str, Any]:
    """A coordination.k8s.io/v1 Lease as client-go's elector writes it (`holder` "" =
    released)."""
    moment = (renewed or dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.UTC)).astimezone(dt.UTC)
    stamp = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": lease_duration_s,
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions,
        },
    }


def lb_name(service: Mapping[str, Any]) -> str:
    """`default_load_balancer_name` of a created Service (a JSON document with its UID)."""
    meta = service["metadata"]
    info = ServiceInfo(namespace=meta.get("namespace", ""), name=meta["name"], uid=meta["uid"])
    return default_load_balancer_name(info)
