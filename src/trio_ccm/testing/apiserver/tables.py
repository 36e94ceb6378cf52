"""`meta.k8s.io/v1` Table responses: the columns `kubectl get` prints, as upstream's printers."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]
Column = tuple[str, str, int, str]  # name, type, priority, description
Row = list[Any]


def human_duration(seconds: float) -> str:
    """Upstream's duration.HumanDuration (the AGE column)."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _age(timestamp: str | None, now: dt.datetime) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        then = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    return human_duration((now - then).total_seconds())


def _name(obj: Obj) -> str:
    return str(obj["metadata"].get("name", ""))


def _created(obj: Obj) -> str | None:
    value = obj["metadata"].get("creationTimestamp")
    return str(value) if value else None


NAME: Column = ("Name", "string", 0, "Name must be unique within a namespace.")
AGE: Column = (
    "Age",
    "string",
    0,
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
)


def _node(obj: Obj, now: dt.datetime) -> Row:
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    state = "Unknown"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            state = "Ready" if cond.get("status") == "True" else "NotReady"
    if spec.get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = obj["metadata"].get("labels") or {}
    roles = sorted(
        {
            key.split("/", 1)[1]
            for key in labels
            if key.startswith("node-role.kubernetes.io/") and key.split("/", 1)[1]
        }
        | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set())
    )
    info = status.get("nodeInfo") or {}
    addresses = status.get("addresses") or []

    def first(kind: str) -> str:
        return next((a.get("address", "") for a in addresses if a.get("type") == kind), "<none>")

    return [
        _name(obj),
        state,
        ",".join(roles) or "<none>",
        _age(_created(obj), now),
        info.get("kubeletVersion", ""),
        first("InternalIP"),
        first("ExternalIP"),
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


_NODE_COLUMNS: list[Column] = [
    NAME,
    ("Status", "string", 0, "The status of the node"),
    ("Roles", "string", 0, "The roles of the node"),
    AGE,
    ("Version", "string", 0, "Kubelet Version reported by the node."),
    ("Internal-IP", "string", 1, "List of internal IPs."),
    ("External-IP", "string", 1, "List of external IPs."),
    ("OS-Image", "string", 1, "OS image reported by the node."),
    ("Kernel-Version", "string", 1, "Kernel version reported by the node."),
    ("Container-Runtime", "string", 1, "Container runtime reported by the node."),
]


def _service(obj: Obj, now: dt.datetime) -> Row:
    spec = obj.get("spec") or {}
    kind = spec.get("type", "ClusterIP")
    ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    external = [
        i.get("ip") or i.get("hostname") for i in ingress if i.get("ip") or i.get("hostname")
    ]
    external += spec.get("externalIPs") or []
    if kind == "ExternalName":
        shown = spec.get("externalName", "<none>")
    elif external:
        shown = ",".join(external)
    elif kind == "LoadBalancer":
        shown = "<pending>"
    else:
        shown = "<none>"
    ports = []
    for port in spec.get("ports") or []:
        text = str(port.get("port"))
        if port.get("nodePort"):
            text += f":{port['nodePort']}"
        ports.append(f"{text}/{port.get('protocol', 'TCP')}")
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
    return [
        _name(obj),
        kind,
        spec.get("clusterIP") or "<none>",
        shown,
        ",".join(ports) or "<none>",
        _age(_created(obj), now),
        selector or "<none>",
    ]


_SERVICE_COLUMNS: list[Column] = [
    NAME,
    ("Type", "string", 0, "type determines how the Service is exposed."),
    ("Cluster-IP", "string", 0, "clusterIP is the IP address of the service."),
    (
        "External-IP",
        "string",
        0,
        "externalIPs is a list of IP addresses for which nodes in "
        "the cluster will also accept traffic for this service.",
    ),
    ("Port(s)", "string", 0, "The list of ports that are exposed by this service."),
    AGE,
    (
        "Selector",
        "string",
        1,
        "Route service traffic to pods with label keys and values matching this selector.",
    ),
]


def _namespace(obj: Obj, now: dt.datetime) -> Row:
    return [_name(obj), (obj.get("status") or {}).get("phase", ""), _age(_created(obj), now)]


def _pod(obj: Obj, now: dt.datetime) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    containers = spec.get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount", 0)) for s in statuses)
    phase = status.get("phase", "Unknown")
    if obj["metadata"].get("deletionTimestamp"):
        phase = "Terminating"
    return [
        _name(obj),
        f"{ready}/{len(containers)}",
        phase,
        restarts,
        _age(_created(obj), now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
    ]


def _event(obj: Obj, now: dt.datetime) -> Row:
    involved = obj.get("involvedObject") or obj.get("regarding") or {}
    last = (
        obj.get("lastTimestamp")
        or obj.get("deprecatedLastTimestamp")
        or obj.get("eventTime")
        or _created(obj)
    )
    kind = str(involved.get("kind", "")).lower()
    return [
        _age(last, now),
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{kind}/{involved.get('name', '')}",
        obj.get("message") or obj.get("note") or "",
    ]


def _lease(obj: Obj, now: dt.datetime) -> Row:
    return [
        _name(obj),
        (obj.get("spec") or {}).get("holderIdentity") or "",
        _age(_created(obj), now),
    ]


def _data_count(obj: Obj, now: dt.datetime) -> Row:
    count = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
    return [_name(obj), count, _age(_created(obj), now)]


def _secret(obj: Obj, now: dt.datetime) -> Row:
    return [_name(obj), obj.get("type", ""), len(obj.get("data") or {}), _age(_created(obj), now)]


def _service_account(obj: Obj, now: dt.datetime) -> Row:
    return [_name(obj), len(obj.get("secrets") or []), _age(_created(obj), now)]


def _role(obj: Obj, now: dt.datetime) -> Row:
    return [_name(obj), _created(obj) or ""]


def _binding(obj: Obj, now: dt.datetime) -> Row:
    ref = obj.get("roleRef") or {}
    return [_name(obj), f"{ref.get('kind', '')}/{ref.get('name', '')}", _age(_created(obj), now)]


def _default(obj: Obj, now: dt.datetime) -> Row:
    return [_name(obj), _age(_created(obj), now)]


PRINTERS: dict[str, tuple[list[Column], Callable[[Obj, dt.datetime], Row]]] = {
    "node": (_NODE_COLUMNS, _node),
    "service": (_SERVICE_COLUMNS, _service),
    "namespace": ([NAME, ("Status", "string", 0, "The status of the namespace"), AGE], _namespace),
    "pod": (
        [
            NAME,
            ("Ready", "string", 0, "The aggregate readiness state of this pod"),
            ("Status", "string", 0, "The aggregate status of the containers in this pod."),
            (
                "Restarts",
                "string",
                0,
                "The number of times the containers in this pod have been restarted.",
            ),
            AGE,
            ("IP", "string", 1, "IP address allocated to the pod."),
            ("Node", "string", 1, "Name of the node the pod is assigned to."),
        ],
        _pod,
    ),
    "event": (
        [
            ("Last Seen", "string", 0, "Time when this Event was last observed."),
            ("Type", "string", 0, "Type of this event (Normal, Warning)."),
            ("Reason", "string", 0, "The reason for this event."),
            ("Object", "string", 0, "The object this Event is about."),
            ("Message", "string", 0, "A human-readable description."),
        ],
        _event,
    ),
    "lease": ([NAME, ("Holder", "string", 0, "The holder of the lease."), AGE], _lease),
    "configmap": ([NAME, ("Data", "string", 0, "Number of keys."), AGE], _data_count),
    "secret": (
        [
            NAME,
            ("Type", "string", 0, "The type of secret"),
            ("Data", "string", 0, "Number of keys."),
            AGE,
        ],
        _secret,
    ),
    "serviceaccount": (
        [NAME, ("Secrets", "string", 0, "Number of secrets."), AGE],
        _service_account,
    ),
    "role": ([NAME, ("Created At", "date", 0, "Time when the object was created.")], _role),
    "binding": ([NAME, ("Role", "string", 0, "The role this binding grants."), AGE], _binding),
}


def table(
    printer: str,
    objects: list[Obj],
    now: dt.datetime,
    *,
    include_object: str,
    resource_version: str,
    continue_token: str = "",
    remaining: int | None = None,
    headers: bool = True,
) -> Obj:
    columns, row_of = PRINTERS.get(printer, ([NAME, AGE], _default))
    rows = []
    for obj in objects:
        row: Obj = {"cells": row_of(obj, now)}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    meta: Obj = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    if remaining is not None:
        meta["remainingItemCount"] = remaining
    definitions = (
        [
            {
                "name": name,
                "type": kind,
                "format": "name" if name == "Name" else "",
                "description": description,
                "priority": priority,
            }
            for name, kind, priority, description in columns
        ]
        if headers
        else []
    )
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": definitions,
        "rows": rows,
    }
