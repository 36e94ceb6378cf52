"""`meta.k8s.io/v1` Table responses: the columns `kubectl get` prints, as upstream's printers."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from trio_ccm_testbed.apiserver.schema import load_schema
from trio_ccm_testbed.apiserver.selector import SelectorError, label_selector_from_object

Obj = dict[str, Any]
# name, type, priority, description: a text, or (definition, field) whose schema
# description upstream's printers take (their SwaggerDoc()[field]).
Column = tuple[str, str, int, "str | tuple[str, str]"]
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


_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_CORE = "io.k8s.api.core.v1."
NAME: Column = ("Name", "string", 0, (_META + "ObjectMeta", "name"))
AGE: Column = ("Age", "string", 0, (_META + "ObjectMeta", "creationTimestamp"))
_CONTAINERS: Column = ("Containers", "string", 1, "Names of each container in the template.")
_IMAGES: Column = ("Images", "string", 1, "Images referenced by each container in the template.")


def _describe(source: str | tuple[str, str]) -> str:
    """A column's description: its text, or the field's schema description (without the
    enum paragraph, which upstream's SwaggerDoc does not carry)."""
    if isinstance(source, str):
        return source
    definition, field = source
    text = str(load_schema()[definition].properties.get(field, {}).get("description", ""))
    return text.split("\n\nPossible enum values:", 1)[0]


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
    ("Version", "string", 0, (_CORE + "NodeSystemInfo", "kubeletVersion")),
    ("Internal-IP", "string", 1, (_CORE + "NodeStatus", "addresses")),
    ("External-IP", "string", 1, (_CORE + "NodeStatus", "addresses")),
    ("OS-Image", "string", 1, (_CORE + "NodeSystemInfo", "osImage")),
    ("Kernel-Version", "string", 1, (_CORE + "NodeSystemInfo", "kernelVersion")),
    ("Container-Runtime", "string", 1, (_CORE + "NodeSystemInfo", "containerRuntimeVersion")),
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
    ("Type", "string", 0, (_CORE + "ServiceSpec", "type")),
    ("Cluster-IP", "string", 0, (_CORE + "ServiceSpec", "clusterIP")),
    ("External-IP", "string", 0, (_CORE + "ServiceSpec", "externalIPs")),
    ("Port(s)", "string", 0, (_CORE + "ServiceSpec", "ports")),
    AGE,
    ("Selector", "string", 1, (_CORE + "ServiceSpec", "selector")),
]


def _namespace(obj: Obj, now: dt.datetime) -> Row:
    return [_name(obj), (obj.get("status") or {}).get("phase", ""), _age(_created(obj), now)]


def _terminal(phase: str) -> bool:
    return phase in ("Succeeded", "Failed")


def _pod(obj: Obj, now: dt.datetime) -> Row:
    """Upstream's printPod: readiness, the status reason as kubectl shows it, restarts."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    phase = status.get("phase", "")
    reason = status.get("reason") or phase
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == (
            "SchedulingGated"
        ):
            reason = "SchedulingGated"
    total = len(spec.get("containers") or [])
    ready = restarts = 0
    initializing = False
    init_containers = spec.get("initContainers") or []
    for i, container in enumerate(status.get("initContainerStatuses") or []):
        restarts += int(container.get("restartCount", 0))
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode", 0) == 0:
            continue
        if terminated:
            if terminated.get("reason"):
                reason = "Init:" + terminated["reason"]
            elif terminated.get("signal"):
                reason = f"Init:Signal:{terminated['signal']}"
            else:
                reason = f"Init:ExitCode:{terminated.get('exitCode', 0)}"
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(init_containers)}"
        initializing = True
        break
    initialized = any(
        c.get("type") == "Initialized" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    if not initializing or initialized:
        restarts = 0
        running = False
        for container in reversed(status.get("containerStatuses") or []):
            restarts += int(container.get("restartCount", 0))
            state = container.get("state") or {}
            waiting, terminated = state.get("waiting") or {}, state.get("terminated")
            if waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated:
                if terminated.get("signal"):
                    reason = f"Signal:{terminated['signal']}"
                else:
                    reason = f"ExitCode:{terminated.get('exitCode', 0)}"
            elif container.get("ready") and state.get("running") is not None:
                running = True
                ready += 1
        if reason == "Completed" and running:
            has_ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            reason = "Running" if has_ready else "NotReady"
    if obj["metadata"].get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif not _terminal(phase):
            reason = "Terminating"
    ips = status.get("podIPs") or []
    gates = spec.get("readinessGates") or []
    readiness = "<none>"
    if gates:
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        met = sum(1 for g in gates if conditions.get(g.get("conditionType")) == "True")
        readiness = f"{met}/{len(gates)}"
    return [
        _name(obj),
        f"{ready}/{total}",
        reason,
        str(restarts),
        _age(_created(obj), now),
        (ips[0].get("ip") if ips else "") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        readiness,
    ]


def _event(obj: Obj, now: dt.datetime) -> Row:
    """Upstream's printEvent, wide (the server always prints every column)."""
    core = "involvedObject" in obj or "regarding" not in obj
    involved = (obj.get("involvedObject") if core else obj.get("regarding")) or {}
    first_time = obj.get("firstTimestamp") or obj.get("deprecatedFirstTimestamp")
    first = _age(first_time, now) if first_time else _age(obj.get("eventTime"), now)
    last_time = obj.get("lastTimestamp") or obj.get("deprecatedLastTimestamp")
    last = _age(last_time, now) if last_time else first
    count = obj.get("count") or obj.get("deprecatedCount") or 0
    series = obj.get("series")
    if series:
        last = _age(series.get("lastObservedTime"), now)
        count = series.get("count", 0)
    elif not count:
        count = 1  # singleton events carry no count in the new API
    kind = str(involved.get("kind", "")).lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = obj.get("source") or obj.get("deprecatedSource") or {}
    component = source.get("component") or obj.get("reportingComponent") or ""
    component = component or obj.get("reportingController") or ""
    instance = source.get("host") or obj.get("reportingInstance") or ""
    return [
        last,
        obj.get("type", ""),
        obj.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        f"{component}, {instance}" if instance else component,
        str(obj.get("message") or obj.get("note") or "").strip(),
        first,
        int(count),
        _name(obj),
    ]


def _containers(template: Any) -> tuple[str, str]:
    containers = ((template or {}).get("spec") or {}).get("containers") or []
    return (
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
    )


def _selector(selector: Any) -> str:
    try:
        return str(label_selector_from_object(selector)) if selector else ""
    except SelectorError:
        return ""


def _deployment(obj: Obj, now: dt.datetime) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(spec.get("template"))
    return [
        _name(obj),
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
        int(status.get("updatedReplicas", 0)),
        int(status.get("availableReplicas", 0)),
        _age(_created(obj), now),
        names,
        images,
        _selector(spec.get("selector")),
    ]


def _daemonset(obj: Obj, now: dt.datetime) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(spec.get("template"))
    node_selector = ((spec.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
    return [
        _name(obj),
        int(status.get("desiredNumberScheduled", 0)),
        int(status.get("currentNumberScheduled", 0)),
        int(status.get("numberReady", 0)),
        int(status.get("updatedNumberScheduled", 0)),
        int(status.get("numberAvailable", 0)),
        ",".join(f"{k}={v}" for k, v in sorted(node_selector.items())) or "<none>",
        _age(_created(obj), now),
        names,
        images,
        _selector(spec.get("selector")),
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
    """Upstream's print(Cluster)RoleBinding: the role, then users, groups, service accounts."""
    ref = obj.get("roleRef") or {}
    users, groups, accounts = [], [], []
    for subject in obj.get("subjects") or []:
        kind, name = subject.get("kind"), subject.get("name", "")
        if kind == "User":
            users.append(name)
        elif kind == "Group":
            groups.append(name)
        elif kind == "ServiceAccount":
            accounts.append(f"{subject.get('namespace', '')}/{name}")
    return [
        _name(obj),
        f"{ref.get('kind', '')}/{ref.get('name', '')}",
        _age(_created(obj), now),
        ", ".join(users),
        ", ".join(groups),
        ", ".join(accounts),
    ]


def _default(obj: Obj, now: dt.datetime) -> Row:
    return [_name(obj), _age(_created(obj), now)]


_APPS = "io.k8s.api.apps.v1."
_LEASE_SPEC = "io.k8s.api.coordination.v1.LeaseSpec"
_EVENT = _CORE + "Event"

PRINTERS: dict[str, tuple[list[Column], Callable[[Obj, dt.datetime], Row]]] = {
    "node": (_NODE_COLUMNS, _node),
    "service": (_SERVICE_COLUMNS, _service),
    "namespace": ([NAME, ("Status", "string", 0, "The status of the namespace"), AGE], _namespace),
    "pod": (
        [
            NAME,
            (
                "Ready",
                "string",
                0,
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            ("Status", "string", 0, "The aggregate status of the containers in this pod."),
            (
                "Restarts",
                "string",
                0,
                "The number of times the containers in this pod have been restarted and when "
                "the last container in this pod has restarted.",
            ),
            AGE,
            ("IP", "string", 1, (_CORE + "PodStatus", "podIP")),
            ("Node", "string", 1, (_CORE + "PodSpec", "nodeName")),
            ("Nominated Node", "string", 1, (_CORE + "PodStatus", "nominatedNodeName")),
            ("Readiness Gates", "string", 1, (_CORE + "PodSpec", "readinessGates")),
        ],
        _pod,
    ),
    "event": (
        [
            ("Last Seen", "string", 0, (_EVENT, "lastTimestamp")),
            ("Type", "string", 0, (_EVENT, "type")),
            ("Reason", "string", 0, (_EVENT, "reason")),
            ("Object", "string", 0, (_EVENT, "involvedObject")),
            ("Subobject", "string", 1, (_CORE + "ObjectReference", "fieldPath")),
            ("Source", "string", 1, (_EVENT, "source")),
            ("Message", "string", 0, (_EVENT, "message")),
            ("First Seen", "string", 1, (_EVENT, "firstTimestamp")),
            ("Count", "string", 1, (_EVENT, "count")),
            ("Name", "string", 1, (_META + "ObjectMeta", "name")),
        ],
        _event,
    ),
    "deployment": (
        [
            NAME,
            ("Ready", "string", 0, "Number of the pod with ready state"),
            ("Up-to-date", "string", 0, (_APPS + "DeploymentStatus", "updatedReplicas")),
            ("Available", "string", 0, (_APPS + "DeploymentStatus", "availableReplicas")),
            AGE,
            _CONTAINERS,
            _IMAGES,
            ("Selector", "string", 1, (_APPS + "DeploymentSpec", "selector")),
        ],
        _deployment,
    ),
    "daemonset": (
        [
            NAME,
            ("Desired", "integer", 0, (_APPS + "DaemonSetStatus", "desiredNumberScheduled")),
            ("Current", "integer", 0, (_APPS + "DaemonSetStatus", "currentNumberScheduled")),
            ("Ready", "integer", 0, (_APPS + "DaemonSetStatus", "numberReady")),
            ("Up-to-date", "integer", 0, (_APPS + "DaemonSetStatus", "updatedNumberScheduled")),
            ("Available", "integer", 0, (_APPS + "DaemonSetStatus", "numberAvailable")),
            ("Node Selector", "string", 0, (_CORE + "PodSpec", "nodeSelector")),
            AGE,
            _CONTAINERS,
            _IMAGES,
            ("Selector", "string", 1, (_APPS + "DaemonSetSpec", "selector")),
        ],
        _daemonset,
    ),
    "lease": (
        [
            NAME,
            ("Holder", "string", 0, ("io.k8s.api.coordination.v1.LeaseSpec", "holderIdentity")),
            AGE,
        ],
        _lease,
    ),
    "configmap": ([NAME, ("Data", "string", 0, (_CORE + "ConfigMap", "data")), AGE], _data_count),
    "secret": (
        [
            NAME,
            ("Type", "string", 0, (_CORE + "Secret", "type")),
            ("Data", "string", 0, (_CORE + "Secret", "data")),
            AGE,
        ],
        _secret,
    ),
    "serviceaccount": (
        [NAME, ("Secrets", "string", 0, (_CORE + "ServiceAccount", "secrets")), AGE],
        _service_account,
    ),
    "role": ([NAME, ("Created At", "date", 0, (_META + "ObjectMeta", "creationTimestamp"))], _role),
    "rolebinding": (
        [
            NAME,
            ("Role", "string", 0, ("io.k8s.api.rbac.v1.RoleBinding", "roleRef")),
            AGE,
            ("Users", "string", 1, "Users in the roleBinding"),
            ("Groups", "string", 1, "Groups in the roleBinding"),
            ("ServiceAccounts", "string", 1, "ServiceAccounts in the roleBinding"),
        ],
        _binding,
    ),
    "clusterrolebinding": (
        [
            NAME,
            ("Role", "string", 0, ("io.k8s.api.rbac.v1.ClusterRoleBinding", "roleRef")),
            AGE,
            ("Users", "string", 1, "Users in the clusterRoleBinding"),
            ("Groups", "string", 1, "Groups in the clusterRoleBinding"),
            ("ServiceAccounts", "string", 1, "ServiceAccounts in the clusterRoleBinding"),
        ],
        _binding,
    ),
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
                "description": _describe(description),
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
