"""The kinds the emulator serves: names, scopes, verbs, and each kind's strategy.

A strategy holds what upstream keeps in `pkg/registry/<group>/<kind>/strategy.go` and
`pkg/apis/core/validation`: defaults, validation on create and update, which part of the
object the main endpoint and the status subresource may change, and allocation (Service
cluster IPs and node ports).
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeGuard

from trio_ccm.testing.apiserver import fielderrors as fe
from trio_ccm.testing.apiserver.fielderrors import FieldError
from trio_ccm.testing.apiserver.patch import MergeList
from trio_ccm.testing.apiserver.selectors import SelectorError, label_selector_from_object

Obj = dict[str, Any]

READ_WRITE = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
STATUS_VERBS = ("get", "patch", "update")


class Strategy:
    """Generic behaviour; kinds override what differs."""

    status_subresource = False
    track_generation = False
    create_on_update = False
    reset_status_on_create = False
    name_validator: Callable[[str], list[str]] = staticmethod(fe.is_dns1123_subdomain)
    # Field labels beyond metadata.name/namespace; None: upstream's generic conversion.
    extra_field_labels: tuple[str, ...] = ()
    legacy_field_label_errors = False
    merge_schema: ClassVar[Mapping[str, MergeList]] = {}

    def defaults(self, obj: Obj) -> None:
        """Fill defaulted fields (on create and on every update)."""

    def prepare_create(self, obj: Obj) -> None:
        """Server-owned fields on create (status resets and the like)."""

    def prepare_update(self, new: Obj, old: Obj) -> None:
        """Carry server-owned values over from `old` before validation."""

    def validate(self, obj: Obj) -> list[FieldError]:
        return []

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        return []

    def allocate(self, new: Obj, old: Obj | None) -> list[FieldError]:
        """Reserve resources the object needs; all-or-nothing (release on error)."""
        return []

    def release(self, obj: Obj, keep: Obj | None = None) -> None:
        """Give back what `obj` holds and `keep` (the new version) no longer does."""

    def field_labels(self, obj: Obj) -> dict[str, str]:
        meta = obj.get("metadata") or {}
        labels = {"metadata.name": meta.get("name", "")}
        if "namespace" in meta:
            labels["metadata.namespace"] = meta.get("namespace", "")
        return labels

    def spec_of(self, obj: Obj) -> Obj:
        """What a change of bumps metadata.generation."""
        return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    strategy: Strategy
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = READ_WRITE
    subresources: tuple[str, ...] = ()
    storage: str = ""
    # Converters for a type that shares another's storage (events.k8s.io/v1 Event).
    to_external: Callable[[Obj], Obj] | None = None
    from_external: Callable[[Obj], Obj] | None = None
    printer: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.group}/{self.version}/{self.plural}"

    @property
    def storage_name(self) -> str:
        return self.storage or self.key

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


# -- helpers ---------------------------------------------------------------------------
def _messages(path: str, value: Any, messages: Sequence[str]) -> list[FieldError]:
    return [fe.invalid(path, value, m) for m in messages]


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    cur: Any = obj
    for part in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# -- Namespace -------------------------------------------------------------------------
class NamespaceStrategy(Strategy):
    status_subresource = True
    name_validator = staticmethod(fe.is_dns1123_label)
    extra_field_labels = ("status.phase",)
    legacy_field_label_errors = True

    def prepare_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Active"}
        obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]

    def defaults(self, obj: Obj) -> None:
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]

    def field_labels(self, obj: Obj) -> dict[str, str]:
        labels = super().field_labels(obj)
        labels["status.phase"] = _get(obj, "status", "phase") or ""
        return labels


# -- Node ------------------------------------------------------------------------------
_TAINT_EFFECTS = ("NoExecute", "NoSchedule", "PreferNoSchedule")
_ADDRESS_TYPES = ("ExternalDNS", "ExternalIP", "Hostname", "InternalDNS", "InternalIP")


def _pod_cidr_errors(cidrs: list[Any]) -> list[FieldError]:
    """ValidateNode's podCIDRs rules, in its order: each a CIDR; more than one only for
    dual stack (one IPv4, one IPv6); no duplicates."""
    errs: list[FieldError] = []
    for i, cidr in enumerate(cidrs):
        errs += _messages(f"spec.podCIDRs[{i}]", cidr, fe.is_valid_cidr(str(cidr)))
    if len(cidrs) <= 1:
        return errs
    versions: set[int] = set()
    for cidr in cidrs:
        with contextlib.suppress(ValueError):
            versions.add(ipaddress.ip_network(str(cidr), strict=False).version)
    if len(cidrs) > 2 or versions != {4, 6}:
        errs.append(
            fe.invalid(
                "spec.podCIDRs", cidrs, "may specify no more than one CIDR for each IP family"
            )
        )
    seen: set[str] = set()
    for i, cidr in enumerate(cidrs):
        if str(cidr) in seen:
            errs.append(fe.duplicate(f"spec.podCIDRs[{i}]", cidr))
        seen.add(str(cidr))
    return errs


class NodeStrategy(Strategy):
    status_subresource = True
    extra_field_labels = ("spec.unschedulable",)
    legacy_field_label_errors = True
    merge_schema: ClassVar[Mapping[str, MergeList]] = {
        "metadata.finalizers": MergeList(),
        "metadata.ownerReferences": MergeList(("uid",)),
        "spec.podCIDRs": MergeList(),
        "status.conditions": MergeList(("type",)),
        "status.addresses": MergeList(("type",)),
        "status.volumesAttached": MergeList(("name",)),
    }

    def defaults(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        # `omitempty` in the Go types: an empty list is not stored (a JSON-patch `test` for
        # null then passes, as it does against a real API server).
        for name in ("taints", "podCIDRs"):
            if spec.get(name) == []:
                del spec[name]
        pod_cidr, pod_cidrs = spec.get("podCIDR"), spec.get("podCIDRs")
        if pod_cidr and not pod_cidrs:
            spec["podCIDRs"] = [pod_cidr]
        elif pod_cidrs and isinstance(pod_cidrs, list) and not pod_cidr:
            spec["podCIDR"] = pod_cidrs[0]
        elif pod_cidr and isinstance(pod_cidrs, list) and pod_cidrs[0] != pod_cidr:
            # v1 -> internal conversion: when both are given and differ, podCIDR wins.
            spec["podCIDRs"] = [pod_cidr]

    def validate(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        spec = obj.get("spec") or {}
        taints = spec.get("taints") or []
        if not isinstance(taints, list):
            return [fe.invalid("spec.taints", taints, "must be a list")]
        seen: set[tuple[str, str]] = set()
        for i, taint in enumerate(taints):
            path = f"spec.taints[{i}]"
            if not isinstance(taint, dict):
                errs.append(fe.invalid(path, taint, "must be an object"))
                continue
            key = taint.get("key", "")
            if not key:
                errs.append(fe.required(f"{path}.key"))
            else:
                errs += _messages(f"{path}.key", key, fe.is_qualified_name(key))
            if taint.get("value"):
                errs += _messages(
                    f"{path}.value", taint["value"], fe.is_valid_label_value(str(taint["value"]))
                )
            effect = taint.get("effect", "")
            if not effect:
                errs.append(fe.required(f"{path}.effect"))
            elif effect not in _TAINT_EFFECTS:
                errs.append(fe.not_supported(f"{path}.effect", effect, _TAINT_EFFECTS))
            if (key, effect) in seen:
                errs.append(fe.duplicate(f"{path}", f"{key}:{effect}"))
            seen.add((key, effect))
        errs += _pod_cidr_errors(spec.get("podCIDRs") or [])
        for i, addr in enumerate(_get(obj, "status", "addresses") or []):
            kind = addr.get("type", "") if isinstance(addr, dict) else ""
            if kind not in _ADDRESS_TYPES:
                errs.append(fe.not_supported(f"status.addresses[{i}].type", kind, _ADDRESS_TYPES))
        return errs

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        old_id = _get(old, "spec", "providerID") or ""
        if old_id and (_get(new, "spec", "providerID") or "") != old_id:
            errs.append(
                fe.forbidden(
                    "spec.providerID",
                    'node updates may not change providerID except from "" to valid',
                )
            )
        old_cidrs = _get(old, "spec", "podCIDRs") or []
        if old_cidrs and (_get(new, "spec", "podCIDRs") or []) != old_cidrs:
            errs.append(
                fe.forbidden(
                    "spec.podCIDRs", 'node updates may not change podCIDR except from "" to valid'
                )
            )
        return errs

    def field_labels(self, obj: Obj) -> dict[str, str]:
        labels = super().field_labels(obj)
        labels["spec.unschedulable"] = "true" if _get(obj, "spec", "unschedulable") else "false"
        return labels


# -- Service ---------------------------------------------------------------------------
_SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
_PROTOCOLS = ("SCTP", "TCP", "UDP")
_TRAFFIC_POLICIES = ("Cluster", "Local")
_IP_MODES = ("Proxy", "VIP")


class ServiceAllocator:
    """Cluster IPs from the service CIDR and node ports from the node-port range."""

    def __init__(
        self,
        cidr: str = "10.96.0.0/12",
        node_ports: tuple[int, int] = (30000, 32767),
        rng: random.Random | None = None,
    ) -> None:
        self.network = ipaddress.ip_network(cidr)
        self.port_range = node_ports
        self.rng = rng or random.Random()  # noqa: S311 - allocation order, not secrets
        self.ips: set[str] = set()
        self.ports: set[int] = set()

    def first_ip(self) -> str:
        return str(self.network.network_address + 1)

    def take_ip(self, wanted: str | None = None) -> str:
        """Reserve `wanted` (or a random free IP); returns the IP or raises ValueError(reason)."""
        if wanted is not None:
            try:
                ip = ipaddress.ip_address(wanted)
            except ValueError as exc:
                raise ValueError("must be a valid IP address") from exc
            if ip not in self.network or ip in (
                self.network.network_address,
                self.network.broadcast_address,
            ):
                raise ValueError(
                    f"failed to allocate IP {wanted}: the provided IP ({wanted}) is not in "
                    f"the valid range. The range of valid IPs is {self.network}"
                )
            if wanted in self.ips:
                raise ValueError(
                    f"failed to allocate IP {wanted}: provided IP is already allocated"
                )
            self.ips.add(wanted)
            return wanted
        size = self.network.num_addresses - 2
        if len(self.ips) >= size:
            raise ValueError("range is full")
        while True:
            offset = self.rng.randrange(2, size + 1)  # .1 is kept for the kubernetes Service
            candidate = str(self.network.network_address + offset)
            if candidate not in self.ips:
                self.ips.add(candidate)
                return candidate

    def take_port(self, wanted: int | None = None) -> int:
        low, high = self.port_range
        if wanted is not None:
            if not low <= wanted <= high:
                raise ValueError(
                    f"provided port is not in the valid range. The range of valid ports is "
                    f"{low}-{high}"
                )
            if wanted in self.ports:
                raise ValueError("provided port is already allocated")
            self.ports.add(wanted)
            return wanted
        if len(self.ports) > high - low:
            raise ValueError("range is full")
        while True:
            candidate = self.rng.randint(low, high)
            if candidate not in self.ports:
                self.ports.add(candidate)
                return candidate


def _needs_cluster_ip(spec: Mapping[str, Any]) -> bool:
    return spec.get("type") != "ExternalName" and spec.get("clusterIP") != "None"


def _needs_node_ports(spec: Mapping[str, Any]) -> bool:
    if spec.get("type") == "NodePort":
        return True
    return (
        spec.get("type") == "LoadBalancer"
        and spec.get("allocateLoadBalancerNodePorts", True) is not False
    )


def _needs_health_check_port(spec: Mapping[str, Any]) -> bool:
    return spec.get("type") == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local"


class GoValue:
    """A bad value Go prints with %#v (a struct); rendered verbatim in field errors."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


def _go_service_port(port: Mapping[str, Any]) -> GoValue:
    """The duplicate-port key as 1.33 prints it: only protocol and port are set."""
    return GoValue(
        f'core.ServicePort{{Name:"", Protocol:"{port.get("protocol", "TCP")}", '
        f"AppProtocol:(*string)(nil), Port:{port.get('port', 0)}, "
        'TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:""}, NodePort:0}'
    )


class ServiceStrategy(Strategy):
    status_subresource = True
    track_generation = True
    reset_status_on_create = True
    name_validator = staticmethod(fe.is_dns1035_label)
    merge_schema: ClassVar[Mapping[str, MergeList]] = {
        "metadata.finalizers": MergeList(),
        "metadata.ownerReferences": MergeList(("uid",)),
        "spec.ports": MergeList(("port", "protocol"), {"protocol": "TCP"}),
        "status.conditions": MergeList(("type",)),
    }

    def __init__(self, allocator: ServiceAllocator) -> None:
        self.allocator = allocator

    def prepare_create(self, obj: Obj) -> None:
        obj["status"] = {"loadBalancer": {}}

    def defaults(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        kind = spec["type"]
        if kind != "ExternalName":
            spec.setdefault("sessionAffinity", "None")
            spec.setdefault("internalTrafficPolicy", "Cluster")
        if kind in ("NodePort", "LoadBalancer"):
            spec.setdefault("externalTrafficPolicy", "Cluster")
        if kind == "LoadBalancer":
            spec.setdefault("allocateLoadBalancerNodePorts", True)
        ports = spec.get("ports")
        if isinstance(ports, list):
            for port in ports:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
                    if "port" in port and not port.get("targetPort"):
                        port["targetPort"] = port["port"]
        if _needs_cluster_ip(spec):
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")

    def prepare_update(self, new: Obj, old: Obj) -> None:
        """Upstream's patchAllocatedValues: keep allocated values a client left empty."""
        spec, old_spec = new.setdefault("spec", {}), old.get("spec") or {}
        if _needs_cluster_ip(old_spec) and _needs_cluster_ip(spec):
            if not spec.get("clusterIP"):
                spec["clusterIP"] = old_spec.get("clusterIP", "")
            if (
                not spec.get("clusterIPs")
                and old_spec.get("clusterIPs")
                and spec["clusterIP"] == old_spec.get("clusterIP")
            ):
                spec["clusterIPs"] = list(old_spec["clusterIPs"])
        if _needs_node_ports(old_spec) and _needs_node_ports(spec):
            # Upstream maps old node ports by port *name* and reuses one unless the new
            # object already uses it elsewhere.
            def used(ports: Any) -> set[Any]:
                return {p.get("nodePort") for p in ports or [] if isinstance(p, dict)}

            taken = used(old_spec.get("ports")) & used(spec.get("ports"))
            by_name = {
                p.get("name", ""): p.get("nodePort")
                for p in old_spec.get("ports") or []
                if isinstance(p, dict)
            }
            for port in spec.get("ports") or []:
                if isinstance(port, dict) and not port.get("nodePort"):
                    previous = by_name.get(port.get("name", ""))
                    if previous and previous not in taken:
                        port["nodePort"] = previous
        if (
            _needs_health_check_port(old_spec)
            and _needs_health_check_port(spec)
            and not spec.get("healthCheckNodePort")
        ):
            spec["healthCheckNodePort"] = old_spec.get("healthCheckNodePort")
        if not _needs_node_ports(spec):
            # Upstream clears node ports when the type no longer uses them.
            for port in spec.get("ports") or []:
                if isinstance(port, dict) and spec.get("type") in ("ClusterIP", "ExternalName"):
                    port.pop("nodePort", None)
        if not _needs_health_check_port(spec):
            spec.pop("healthCheckNodePort", None)
        # Upstream's dropTypeDependentFields: a type change clears the fields the new type
        # may not have, unless the client changed them in the same update.
        external = ("NodePort", "LoadBalancer")
        if (
            old_spec.get("type") in external
            and spec.get("type") not in external
            and spec.get("externalTrafficPolicy") == old_spec.get("externalTrafficPolicy")
        ):
            spec.pop("externalTrafficPolicy", None)
        if old_spec.get("type") == "LoadBalancer" and spec.get("type") != "LoadBalancer":
            for field in ("allocateLoadBalancerNodePorts", "loadBalancerClass"):
                if spec.get(field) == old_spec.get(field):
                    spec.pop(field, None)

    def validate(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [fe.required("spec")]
        kind = spec.get("type", "ClusterIP")
        if kind not in _SERVICE_TYPES:
            errs.append(fe.not_supported("spec.type", kind, _SERVICE_TYPES))
        ports = spec.get("ports") or []
        if not isinstance(ports, list):
            return [*errs, fe.invalid("spec.ports", ports, "must be a list")]
        if kind == "ExternalName":
            name = spec.get("externalName", "")
            if not name:
                errs.append(fe.required("spec.externalName"))
            else:
                errs += _messages("spec.externalName", name, fe.is_dns1123_subdomain(name))
        elif not ports and spec.get("clusterIP") != "None":
            errs.append(fe.required("spec.ports"))
        names: set[str] = set()
        keys: set[tuple[Any, Any]] = set()
        for i, port in enumerate(ports):
            path = f"spec.ports[{i}]"
            if not isinstance(port, dict):
                errs.append(fe.invalid(path, port, "must be an object"))
                continue
            name = port.get("name", "")
            if len(ports) > 1 and not name:
                errs.append(fe.required(f"{path}.name"))
            elif name:
                errs += _messages(f"{path}.name", name, fe.is_dns1123_label(name))
                if name in names:
                    errs.append(fe.duplicate(f"{path}.name", name))
                names.add(name)
            number = port.get("port")
            if not _is_int(number) or not 1 <= number <= 65535:
                errs.append(
                    fe.invalid(f"{path}.port", number, "must be between 1 and 65535, inclusive")
                )
            protocol = port.get("protocol", "TCP")
            if protocol not in _PROTOCOLS:
                errs.append(fe.not_supported(f"{path}.protocol", protocol, _PROTOCOLS))
            key = (number, protocol)
            if key in keys:
                errs.append(fe.duplicate(path, _go_service_port(port)))
            keys.add(key)
            target = port.get("targetPort")
            if _is_int(target) and not 1 <= target <= 65535:
                errs.append(
                    fe.invalid(
                        f"{path}.targetPort", target, "must be between 1 and 65535, inclusive"
                    )
                )
            node_port = port.get("nodePort")
            if node_port:
                if kind == "ClusterIP":
                    errs.append(
                        fe.forbidden(
                            f"{path}.nodePort", "may not be used when `type` is 'ClusterIP'"
                        )
                    )
                elif not _is_int(node_port) or not 1 <= node_port <= 65535:
                    errs.append(
                        fe.invalid(
                            f"{path}.nodePort", node_port, "must be between 1 and 65535, inclusive"
                        )
                    )
        policy = spec.get("externalTrafficPolicy")
        if policy:
            if kind not in ("NodePort", "LoadBalancer"):
                errs.append(
                    fe.invalid(
                        "spec.externalTrafficPolicy",
                        policy,
                        "may only be set for externally-accessible services",
                    )
                )
            elif policy not in _TRAFFIC_POLICIES:
                errs.append(
                    fe.not_supported("spec.externalTrafficPolicy", policy, _TRAFFIC_POLICIES)
                )
        internal = spec.get("internalTrafficPolicy")
        if internal and internal not in _TRAFFIC_POLICIES:
            errs.append(fe.not_supported("spec.internalTrafficPolicy", internal, _TRAFFIC_POLICIES))
        ranges = spec.get("loadBalancerSourceRanges") or []
        if ranges and kind != "LoadBalancer":
            errs.append(
                fe.forbidden(
                    "spec.loadBalancerSourceRanges",
                    "may only be used when `type` is 'LoadBalancer'",
                )
            )
        for i, cidr in enumerate(ranges if isinstance(ranges, list) else [ranges]):
            if not isinstance(cidr, str) or fe.is_valid_cidr(cidr.strip()):
                errs.append(
                    fe.invalid(
                        f"spec.loadBalancerSourceRanges[{i}]",
                        cidr,
                        "must be a list of IP ranges. For example, 10.240.0.0/24,10.250.0.0/24 ",
                    )
                )
        lb_class = spec.get("loadBalancerClass")
        if lb_class is not None:
            if kind != "LoadBalancer":
                errs.append(
                    fe.forbidden(
                        "spec.loadBalancerClass", "may only be used when `type` is 'LoadBalancer'"
                    )
                )
            else:
                errs += _messages(
                    "spec.loadBalancerClass", lb_class, fe.is_qualified_name(str(lb_class))
                )
        ip = spec.get("clusterIP", "")
        if ip and ip != "None" and fe.is_valid_ip(str(ip)):
            errs.append(fe.invalid("spec.clusterIPs[0]", ip, "must be a valid IP address"))
        errs += self._validate_status(obj)
        return errs

    def _validate_status(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        ingress = _get(obj, "status", "loadBalancer", "ingress") or []
        for i, entry in enumerate(ingress if isinstance(ingress, list) else []):
            path = f"status.loadBalancer.ingress[{i}]"
            if not isinstance(entry, dict):
                errs.append(fe.invalid(path, entry, "must be an object"))
                continue
            ip, host = entry.get("ip", ""), entry.get("hostname", "")
            if ip:
                errs += _messages(f"{path}.ip", ip, fe.is_valid_ip(str(ip)))
            if host:
                msgs = fe.is_dns1123_subdomain(str(host))
                errs += _messages(f"{path}.hostname", host, msgs)
                if not fe.is_valid_ip(str(host)):
                    errs.append(
                        fe.invalid(
                            f"{path}.hostname", host, "must be a DNS name, not an IP address"
                        )
                    )
            mode = entry.get("ipMode")
            if mode is not None:
                if not ip:
                    errs.append(fe.required(f"{path}.ipMode", "must be specified when `ip` is set"))
                elif mode not in _IP_MODES:
                    errs.append(fe.not_supported(f"{path}.ipMode", mode, _IP_MODES))
        return errs

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        old_ip = old_spec.get("clusterIP", "")
        if (
            old_ip
            and _needs_cluster_ip(old_spec)
            and _needs_cluster_ip(spec)
            and spec.get("clusterIP") != old_ip
        ):
            errs.append(
                fe.invalid(
                    "spec.clusterIPs[0]", [spec.get("clusterIP", "")], "may not change once set"
                )
            )
        old_class = old_spec.get("loadBalancerClass")
        if (
            old_spec.get("type") == "LoadBalancer"
            and spec.get("type") == "LoadBalancer"
            and spec.get("loadBalancerClass") != old_class
        ):
            errs.append(
                fe.invalid(
                    "spec.loadBalancerClass",
                    spec.get("loadBalancerClass"),
                    "may not change once set",
                )
            )
        return errs

    def allocate(self, new: Obj, old: Obj | None) -> list[FieldError]:
        spec = new["spec"]
        old_spec = (old or {}).get("spec") or {}
        taken_ips: list[str] = []
        taken_ports: list[int] = []
        errs: list[FieldError] = []
        held_ip = old_spec.get("clusterIP") if old and _needs_cluster_ip(old_spec) else None
        held_ports = {
            p.get("nodePort")
            for p in old_spec.get("ports") or []
            if isinstance(p, dict) and p.get("nodePort")
        }
        if old and old_spec.get("healthCheckNodePort"):
            held_ports.add(old_spec["healthCheckNodePort"])
        if _needs_cluster_ip(spec):
            wanted = spec.get("clusterIP") or None
            if wanted != held_ip or wanted is None:
                try:
                    ip = self.allocator.take_ip(wanted)
                    taken_ips.append(ip)
                    spec["clusterIP"] = ip
                except ValueError as exc:
                    errs.append(fe.invalid("spec.clusterIPs", [wanted or ""], str(exc)))
            spec["clusterIPs"] = [spec.get("clusterIP", "")]
        elif spec.get("type") == "ExternalName":
            spec.pop("clusterIP", None)
            spec.pop("clusterIPs", None)
        else:
            spec["clusterIPs"] = ["None"]
        if _needs_node_ports(spec):
            for i, port in enumerate(spec.get("ports") or []):
                wanted_port = port.get("nodePort") or None
                if wanted_port is not None and wanted_port in held_ports:
                    continue
                try:
                    port["nodePort"] = self.allocator.take_port(wanted_port)
                    taken_ports.append(port["nodePort"])
                except ValueError as exc:
                    errs.append(fe.invalid(f"spec.ports[{i}].nodePort", wanted_port, str(exc)))
        if _needs_health_check_port(spec):
            wanted_hc = spec.get("healthCheckNodePort") or None
            if wanted_hc is None or wanted_hc not in held_ports:
                try:
                    spec["healthCheckNodePort"] = self.allocator.take_port(wanted_hc)
                    taken_ports.append(spec["healthCheckNodePort"])
                except ValueError as exc:
                    errs.append(fe.invalid("spec.healthCheckNodePort", wanted_hc, str(exc)))
        if errs:
            self.allocator.ips.difference_update(taken_ips)
            self.allocator.ports.difference_update(taken_ports)
        return errs

    def release(self, obj: Obj, keep: Obj | None = None) -> None:
        spec = obj.get("spec") or {}
        keep_spec = (keep or {}).get("spec") or {}
        ip = spec.get("clusterIP")
        if ip and ip != "None" and ip != keep_spec.get("clusterIP"):
            self.allocator.ips.discard(ip)
        kept = {p.get("nodePort") for p in keep_spec.get("ports") or [] if isinstance(p, dict)}
        kept.add(keep_spec.get("healthCheckNodePort"))
        held = [p.get("nodePort") for p in spec.get("ports") or [] if isinstance(p, dict)]
        held.append(spec.get("healthCheckNodePort"))
        for port in held:
            if port and port not in kept:
                self.allocator.ports.discard(port)


# -- simple kinds ----------------------------------------------------------------------
class ConfigMapStrategy(Strategy):
    def validate(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        size = 0
        for section in ("data", "binaryData"):
            values = obj.get(section) or {}
            if not isinstance(values, dict):
                errs.append(fe.invalid(section, values, "must be a map"))
                continue
            for key, value in values.items():
                errs += _messages(f"{section}[{key}]", key, _config_key(key))
                size += len(key) + len(str(value))
        if size > 1024 * 1024:
            errs.append(fe.too_long("", "", 1024 * 1024))
        return errs


def _config_key(key: str) -> list[str]:
    import re

    if not key or len(key) > 253 or not re.fullmatch(r"[-._a-zA-Z0-9]+", key) or key in (".", ".."):
        return [
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
            "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation "
            "is '[-._a-zA-Z0-9]+')"
        ]
    return []


class SecretStrategy(ConfigMapStrategy):
    extra_field_labels = ("type",)
    legacy_field_label_errors = True

    def defaults(self, obj: Obj) -> None:
        import base64

        obj.setdefault("type", "Opaque")
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict):
            data = obj.setdefault("data", {})
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()

    def validate(self, obj: Obj) -> list[FieldError]:
        import base64
        import binascii

        errs = super().validate(obj)
        for key, value in (obj.get("data") or {}).items():
            try:
                base64.b64decode(str(value), validate=True)
            except (binascii.Error, ValueError):
                errs.append(fe.invalid(f"data[{key}]", "<value omitted>", "must be base64-encoded"))
        return errs

    def field_labels(self, obj: Obj) -> dict[str, str]:
        labels = super().field_labels(obj)
        labels["type"] = obj.get("type", "")
        return labels


class ServiceAccountStrategy(Strategy):
    pass


class PodStrategy(Strategy):
    status_subresource = True
    track_generation = True
    reset_status_on_create = True
    extra_field_labels = (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    )
    legacy_field_label_errors = True
    merge_schema: ClassVar[Mapping[str, MergeList]] = {
        "metadata.finalizers": MergeList(),
        "metadata.ownerReferences": MergeList(("uid",)),
        "spec.containers": MergeList(("name",)),
        "spec.containers[].ports": MergeList(("containerPort", "protocol"), {"protocol": "TCP"}),
        "spec.containers[].env": MergeList(("name",)),
        "spec.initContainers": MergeList(("name",)),
        "spec.volumes": MergeList(("name",)),
        "spec.tolerations": MergeList(),
        "status.conditions": MergeList(("type",)),
    }

    def prepare_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}

    def defaults(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("serviceAccountName", "default")

    def validate(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        containers = _get(obj, "spec", "containers")
        if not containers:
            return [fe.required("spec.containers")]
        names: set[str] = set()
        for i, container in enumerate(containers):
            path = f"spec.containers[{i}]"
            name = container.get("name", "") if isinstance(container, dict) else ""
            if not name:
                errs.append(fe.required(f"{path}.name"))
            elif name in names:
                errs.append(fe.duplicate(f"{path}.name", name))
            else:
                errs += _messages(f"{path}.name", name, fe.is_dns1123_label(name))
            names.add(name)
            if isinstance(container, dict) and not container.get("image"):
                errs.append(fe.required(f"{path}.image"))
        return errs

    def field_labels(self, obj: Obj) -> dict[str, str]:
        labels = super().field_labels(obj)
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        for name in self.extra_field_labels:
            section, _, attr = name.partition(".")
            value = (spec if section == "spec" else status).get(attr, "")
            labels[name] = str(value).lower() if isinstance(value, bool) else str(value or "")
        return labels


class EventStrategy(Strategy):
    create_on_update = True
    extra_field_labels = (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    )
    legacy_field_label_errors = True

    def validate(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        involved = obj.get("involvedObject") or {}
        namespace = obj["metadata"].get("namespace", "")
        involved_ns = involved.get("namespace", "")
        if involved_ns and involved_ns != namespace:
            errs.append(
                fe.invalid(
                    "involvedObject.namespace", involved_ns, "does not match event.namespace"
                )
            )
        kind = obj.get("type")
        if kind and kind not in ("Normal", "Warning"):
            errs.append(fe.not_supported("type", kind, ("Normal", "Warning")))
        return errs

    def field_labels(self, obj: Obj) -> dict[str, str]:
        labels = super().field_labels(obj)
        involved = obj.get("involvedObject") or {}
        for attr in (
            "kind",
            "namespace",
            "name",
            "uid",
            "apiVersion",
            "resourceVersion",
            "fieldPath",
        ):
            labels[f"involvedObject.{attr}"] = str(involved.get(attr, ""))
        labels["reason"] = obj.get("reason", "")
        labels["reportingComponent"] = obj.get("reportingComponent", "")
        labels["source"] = (obj.get("source") or {}).get("component", "")
        labels["type"] = obj.get("type", "")
        return labels


# events.k8s.io/v1 is a second representation of the same stored core/v1 Events.
_EVENTS_V1_RENAMES = (
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("related", "related"),
    ("action", "action"),
    ("reason", "reason"),
    ("type", "type"),
    ("eventTime", "eventTime"),
    ("reportingInstance", "reportingInstance"),
)


def event_to_v1(obj: Obj) -> Obj:
    out: Obj = {"kind": "Event", "apiVersion": "events.k8s.io/v1", "metadata": obj["metadata"]}
    for core, v1 in _EVENTS_V1_RENAMES:
        if core in obj:
            out[v1] = obj[core]
    series = obj.get("series")
    if isinstance(series, dict):
        out["series"] = {
            "count": series.get("count", 0),
            "lastObservedTime": series.get("lastObservedTime"),
        }
    return out


def event_from_v1(obj: Obj) -> Obj:
    out: Obj = {"kind": "Event", "apiVersion": "v1", "metadata": obj.get("metadata") or {}}
    for core, v1 in _EVENTS_V1_RENAMES:
        if v1 in obj:
            out[core] = obj[v1]
    series = obj.get("series")
    if isinstance(series, dict):
        out["series"] = dict(series)
    return out


class EventV1Strategy(EventStrategy):
    """Validation runs on the core form (the stored one)."""

    def validate(self, obj: Obj) -> list[FieldError]:
        errs = super().validate(obj)
        if not obj.get("eventTime"):
            errs.append(fe.required("eventTime"))
        if not obj.get("reportingComponent"):
            errs.append(fe.required("reportingController"))
        return errs


class LeaseStrategy(Strategy):
    def validate(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        spec = obj.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and (not _is_int(duration) or duration <= 0):
            errs.append(fe.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
        transitions = spec.get("leaseTransitions")
        if transitions is not None and (not _is_int(transitions) or transitions < 0):
            errs.append(
                fe.invalid(
                    "spec.leaseTransitions", transitions, "must be greater than or equal to 0"
                )
            )
        return errs


def _path_segment_name(name: str) -> list[str]:
    """ValidateRBACName (path.IsValidPathSegmentName): RBAC names may hold colons, as in
    `system:controller:node-controller`; only `.`, `..`, `/` and `%` are refused."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{part}'" for part in ("/", "%") if part in name]


class RoleStrategy(Strategy):
    name_validator = staticmethod(_path_segment_name)

    def validate(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        rules = obj.get("rules") or []
        for i, rule in enumerate(rules if isinstance(rules, list) else []):
            path = f"rules[{i}]"
            if not isinstance(rule, dict):
                errs.append(fe.invalid(path, rule, "must be an object"))
                continue
            if not rule.get("verbs"):
                errs.append(fe.required(f"{path}.verbs", "verbs must contain at least one value"))
            if rule.get("nonResourceURLs"):
                if obj["metadata"].get("namespace"):
                    errs.append(
                        fe.invalid(
                            f"{path}.nonResourceURLs",
                            rule["nonResourceURLs"],
                            "namespaced rules cannot apply to non-resource URLs",
                        )
                    )
                if rule.get("resources") or rule.get("apiGroups"):
                    errs.append(
                        fe.invalid(
                            f"{path}.nonResourceURLs",
                            rule["nonResourceURLs"],
                            "rules cannot apply to both regular resources and non-resource URLs",
                        )
                    )
            elif not rule.get("resources"):
                errs.append(
                    fe.required(
                        f"{path}.resources", "resource rules must supply at least one resource"
                    )
                )
        return errs


class BindingStrategy(Strategy):
    name_validator = staticmethod(_path_segment_name)

    def validate(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        ref = obj.get("roleRef")
        if not isinstance(ref, dict):
            return [fe.required("roleRef")]
        if ref.get("apiGroup") != "rbac.authorization.k8s.io":
            errs.append(
                fe.not_supported(
                    "roleRef.apiGroup", ref.get("apiGroup", ""), ("rbac.authorization.k8s.io",)
                )
            )
        allowed = ("ClusterRole", "Role") if obj["metadata"].get("namespace") else ("ClusterRole",)
        if ref.get("kind") not in allowed:
            errs.append(fe.not_supported("roleRef.kind", ref.get("kind", ""), allowed))
        if not ref.get("name"):
            errs.append(fe.required("roleRef.name"))
        for i, subject in enumerate(obj.get("subjects") or []):
            path = f"subjects[{i}]"
            kind = subject.get("kind", "") if isinstance(subject, dict) else ""
            if kind not in ("Group", "ServiceAccount", "User"):
                errs.append(
                    fe.not_supported(f"{path}.kind", kind, ("Group", "ServiceAccount", "User"))
                )
            elif not subject.get("name"):
                errs.append(fe.required(f"{path}.name"))
            elif kind == "ServiceAccount" and not subject.get("namespace"):
                errs.append(fe.required(f"{path}.namespace"))
        return errs

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        if new.get("roleRef") != old.get("roleRef"):
            return [fe.invalid("roleRef", new.get("roleRef"), "cannot change roleRef")]
        return []


# -- apps/v1 workloads -----------------------------------------------------------------
# Stored and validated only: no controller creates ReplicaSets or Pods for them, so their
# status stays as created ({}) unless a client writes it through /status.
_DNS_POLICIES = ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None")
_DEPLOYMENT_STRATEGIES = ("Recreate", "RollingUpdate")
_DAEMONSET_STRATEGIES = ("OnDelete", "RollingUpdate")
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_PROBE_DEFAULTS = {
    "timeoutSeconds": 1,
    "periodSeconds": 10,
    "successThreshold": 1,
    "failureThreshold": 3,
}


def _dicts(value: Any) -> list[Obj]:
    """The object elements of a list field (anything else is left to validation)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _default_container(container: Obj, host_network: bool) -> None:
    """SetDefaults_Container and friends (core/v1 defaults.go), for a pod template."""
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    image = str(container.get("image") or "")
    # Upstream: Always for an untagged or `:latest` image (a digest counts as pinned).
    tag = image.rpartition("/")[2].partition("@")[0]
    pinned = "@" in image or (":" in tag and not tag.endswith(":latest"))
    container.setdefault("imagePullPolicy", "IfNotPresent" if pinned else "Always")
    for port in _dicts(container.get("ports")):
        port.setdefault("protocol", "TCP")
        if host_network and "containerPort" in port:
            port.setdefault("hostPort", port["containerPort"])
    for name in _PROBES:
        probe = container.get(name)
        if not isinstance(probe, dict):
            continue
        for key, value in _PROBE_DEFAULTS.items():
            probe.setdefault(key, value)
        http_get = probe.get("httpGet")
        if isinstance(http_get, dict):
            http_get.setdefault("path", "/")
            http_get.setdefault("scheme", "HTTP")


def _default_pod_template(template: Any) -> None:
    """SetDefaults_PodSpec for a template (no service account: admission sets that on Pods)."""
    if not isinstance(template, dict):
        return
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    host_network = spec.get("hostNetwork") is True
    for section in ("initContainers", "containers"):
        for container in _dicts(spec.get(section)):
            _default_container(container, host_network)
    for volume in _dicts(spec.get("volumes")):
        for source in ("configMap", "secret"):
            if isinstance(volume.get(source), dict):
                volume[source].setdefault("defaultMode", 0o644)


def _pod_template_errors(template: Any, selector: Any, path: str) -> list[FieldError]:
    """ValidatePodTemplateSpecForReplicaSet: the labels match the selector, then the pod."""
    errs: list[FieldError] = []
    if not isinstance(template, dict):
        template = {}
    meta = template.get("metadata") or {}
    labels = (meta.get("labels") or {}) if isinstance(meta, dict) else {}
    try:
        errs += fe.validate_labels(labels, f"{path}.metadata.labels")
    except TypeError as exc:  # upstream refuses such a body while decoding it
        errs.append(fe.invalid(f"{path}.metadata.labels", labels, str(exc)))
        labels = {}
    try:
        chosen = label_selector_from_object(selector if isinstance(selector, dict) else None)
    except SelectorError:
        chosen = None  # reported on the selector itself
    if chosen is not None and not chosen.empty and not chosen.matches(labels):
        errs.append(
            fe.invalid(
                f"{path}.metadata.labels", labels, "`selector` does not match template `labels`"
            )
        )
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return [*errs, fe.required(f"{path}.spec.containers")]
    # The containers' checks are the Pod's, on the template's paths.
    errs += [
        dataclasses.replace(err, field=f"{path}.{err.field}")
        for err in PodStrategy().validate({"spec": spec})
    ]
    volumes: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        name = volume.get("name", "") if isinstance(volume, dict) else ""
        vpath = f"{path}.spec.volumes[{i}].name"
        if not name:
            errs.append(fe.required(vpath))
        elif name in volumes:
            errs.append(fe.duplicate(vpath, name))
        else:
            errs += _messages(vpath, name, fe.is_dns1123_label(name))
        volumes.add(name)
    for section in ("initContainers", "containers"):
        for i, container in enumerate(_dicts(spec.get(section))):
            cpath = f"{path}.spec.{section}[{i}]"
            for j, mount in enumerate(_dicts(container.get("volumeMounts"))):
                mpath = f"{cpath}.volumeMounts[{j}]"
                if not mount.get("name"):
                    errs.append(fe.required(f"{mpath}.name"))
                elif mount["name"] not in volumes:
                    errs.append(fe.not_found(f"{mpath}.name", mount["name"]))
                if not mount.get("mountPath"):
                    errs.append(fe.required(f"{mpath}.mountPath"))
            for j, port in enumerate(_dicts(container.get("ports"))):
                number = port.get("containerPort")
                if not _is_int(number) or not 1 <= number <= 65535:
                    errs.append(
                        fe.invalid(
                            f"{cpath}.ports[{j}].containerPort",
                            number,
                            "must be between 1 and 65535, inclusive",
                        )
                    )
    restart = spec.get("restartPolicy", "Always")
    if restart != "Always":
        errs.append(fe.not_supported(f"{path}.spec.restartPolicy", restart, ("Always",)))
    dns = spec.get("dnsPolicy", "ClusterFirst")
    if dns not in _DNS_POLICIES:
        errs.append(fe.not_supported(f"{path}.spec.dnsPolicy", dns, _DNS_POLICIES))
    if spec.get("activeDeadlineSeconds") is not None:
        errs.append(
            fe.forbidden(
                f"{path}.spec.activeDeadlineSeconds",
                "activeDeadlineSeconds in ReplicaSet is not Supported",
            )
        )
    return errs


def _non_negative(obj: Obj, path: str) -> list[FieldError]:
    value = _get(obj, *path.split("."))
    if value is not None and (not _is_int(value) or value < 0):
        return [fe.invalid(path, value, "must be greater than or equal to 0")]
    return []


class WorkloadStrategy(Strategy):
    """What Deployments and DaemonSets share: a selector, a pod template, a status."""

    status_subresource = True
    track_generation = True
    reset_status_on_create = True
    # Upstream's patchMergeKeys of PodTemplateSpec and the workload status.
    merge_schema: ClassVar[Mapping[str, MergeList]] = {
        "metadata.finalizers": MergeList(),
        "metadata.ownerReferences": MergeList(("uid",)),
        "spec.template.spec.containers": MergeList(("name",)),
        "spec.template.spec.containers[].ports": MergeList(
            ("containerPort", "protocol"), {"protocol": "TCP"}
        ),
        "spec.template.spec.containers[].env": MergeList(("name",)),
        "spec.template.spec.containers[].volumeMounts": MergeList(("mountPath",)),
        "spec.template.spec.initContainers": MergeList(("name",)),
        "spec.template.spec.initContainers[].env": MergeList(("name",)),
        "spec.template.spec.initContainers[].volumeMounts": MergeList(("mountPath",)),
        "spec.template.spec.volumes": MergeList(("name",)),
        "spec.template.spec.imagePullSecrets": MergeList(("name",)),
        "status.conditions": MergeList(("type",)),
    }
    # The word in "empty selector is invalid for <kind>".
    kind_word: ClassVar[str] = ""

    def prepare_create(self, obj: Obj) -> None:
        obj["status"] = {}

    def defaults(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            spec.setdefault("revisionHistoryLimit", 10)
            _default_pod_template(spec.get("template"))

    def validate(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [fe.required("spec")]
        errs: list[FieldError] = []
        selector = spec.get("selector")
        if selector is None:
            errs.append(fe.required("spec.selector"))
        elif not isinstance(selector, dict):
            errs.append(fe.invalid("spec.selector", selector, "must be a label selector"))
        else:
            try:
                label_selector_from_object(selector)
            except SelectorError as exc:
                errs.append(fe.invalid("spec.selector", selector, str(exc)))
            if not selector.get("matchLabels") and not selector.get("matchExpressions"):
                errs.append(
                    fe.invalid(
                        "spec.selector", selector, f"empty selector is invalid for {self.kind_word}"
                    )
                )
        errs += _pod_template_errors(spec.get("template"), selector, "spec.template")
        errs += _non_negative(obj, "spec.revisionHistoryLimit")
        errs += _non_negative(obj, "spec.minReadySeconds")
        return errs

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        selector = _get(new, "spec", "selector")
        if selector != _get(old, "spec", "selector"):
            return [fe.invalid("spec.selector", selector, "field is immutable")]
        return []


def _is_zero(value: Any) -> bool:
    return value in (0, "0", "0%")


class DeploymentStrategy(WorkloadStrategy):
    kind_word = "deployment"

    def defaults(self, obj: Obj) -> None:
        super().defaults(obj)
        spec = obj["spec"]
        if not isinstance(spec, dict):
            return
        spec.setdefault("replicas", 1)
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("maxUnavailable", "25%")
                    rolling.setdefault("maxSurge", "25%")

    def validate(self, obj: Obj) -> list[FieldError]:
        errs = _non_negative(obj, "spec.replicas") + super().validate(obj)
        if not isinstance(obj.get("spec"), dict):
            return errs
        strategy = _get(obj, "spec", "strategy") or {}
        kind = strategy.get("type") if isinstance(strategy, dict) else None
        if kind not in _DEPLOYMENT_STRATEGIES:
            errs.append(fe.not_supported("spec.strategy.type", kind, _DEPLOYMENT_STRATEGIES))
        elif kind == "Recreate" and strategy.get("rollingUpdate") is not None:
            errs.append(
                fe.forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                )
            )
        elif kind == "RollingUpdate":
            rolling = strategy.get("rollingUpdate") or {}
            unavailable = rolling.get("maxUnavailable")
            if _is_zero(unavailable) and _is_zero(rolling.get("maxSurge")):
                errs.append(
                    fe.invalid(
                        "spec.strategy.rollingUpdate.maxUnavailable",
                        unavailable,
                        "may not be 0 when `maxSurge` is 0",
                    )
                )
        return errs


class DaemonSetStrategy(WorkloadStrategy):
    kind_word = "daemonset"

    def defaults(self, obj: Obj) -> None:
        super().defaults(obj)
        spec = obj["spec"]
        if not isinstance(spec, dict):
            return
        strategy = spec.setdefault("updateStrategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("maxUnavailable", 1)
                    rolling.setdefault("maxSurge", 0)

    def validate(self, obj: Obj) -> list[FieldError]:
        errs = super().validate(obj)
        if not isinstance(obj.get("spec"), dict):
            return errs
        strategy = _get(obj, "spec", "updateStrategy") or {}
        kind = strategy.get("type") if isinstance(strategy, dict) else None
        if kind not in _DAEMONSET_STRATEGIES:
            errs.append(fe.not_supported("spec.updateStrategy.type", kind, _DAEMONSET_STRATEGIES))
        return errs


# -- the table of kinds ----------------------------------------------------------------
def standard_types(allocator: ServiceAllocator) -> list[ResourceType]:
    """Every stored kind the emulator serves."""
    return [
        ResourceType(
            "",
            "v1",
            "Namespace",
            "namespaces",
            "namespace",
            False,
            NamespaceStrategy(),
            short_names=("ns",),
            subresources=("status",),
            verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
            printer="namespace",
        ),
        ResourceType(
            "",
            "v1",
            "Node",
            "nodes",
            "node",
            False,
            NodeStrategy(),
            short_names=("no",),
            subresources=("status",),
            printer="node",
        ),
        ResourceType(
            "",
            "v1",
            "Service",
            "services",
            "service",
            True,
            ServiceStrategy(allocator),
            short_names=("svc",),
            categories=("all",),
            subresources=("status",),
            printer="service",
            verbs=(
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ),
        ),
        ResourceType(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            "configmap",
            True,
            ConfigMapStrategy(),
            short_names=("cm",),
            printer="configmap",
        ),
        ResourceType(
            "", "v1", "Secret", "secrets", "secret", True, SecretStrategy(), printer="secret"
        ),
        ResourceType(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            "serviceaccount",
            True,
            ServiceAccountStrategy(),
            short_names=("sa",),
            subresources=("token",),
            printer="serviceaccount",
        ),
        ResourceType(
            "",
            "v1",
            "Pod",
            "pods",
            "pod",
            True,
            PodStrategy(),
            short_names=("po",),
            categories=("all",),
            subresources=("status",),
            printer="pod",
        ),
        ResourceType(
            "",
            "v1",
            "Event",
            "events",
            "event",
            True,
            EventStrategy(),
            short_names=("ev",),
            printer="event",
        ),
        ResourceType(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            "event",
            True,
            EventV1Strategy(),
            short_names=("ev",),
            storage="/v1/events",
            to_external=event_to_v1,
            from_external=event_from_v1,
            printer="event",
        ),
        ResourceType(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            "lease",
            True,
            LeaseStrategy(),
            printer="lease",
        ),
        ResourceType(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            "clusterrole",
            False,
            RoleStrategy(),
            printer="role",
        ),
        ResourceType(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            "clusterrolebinding",
            False,
            BindingStrategy(),
            printer="binding",
        ),
        ResourceType(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
            "roles",
            "role",
            True,
            RoleStrategy(),
            printer="role",
        ),
        ResourceType(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            "rolebinding",
            True,
            BindingStrategy(),
            printer="binding",
        ),
        ResourceType(
            "apps",
            "v1",
            "DaemonSet",
            "daemonsets",
            "daemonset",
            True,
            DaemonSetStrategy(),
            short_names=("ds",),
            categories=("all",),
            subresources=("status",),
        ),
        ResourceType(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            "deployment",
            True,
            DeploymentStrategy(),
            short_names=("deploy",),
            categories=("all",),
            subresources=("status",),
        ),
    ]


@dataclass(frozen=True)
class ReviewType:
    """A create-only kind computed on the spot and never stored (access and token reviews)."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


REVIEW_TYPES = (
    ReviewType(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
    ),
    ReviewType(
        "authorization.k8s.io",
        "v1",
        "SubjectAccessReview",
        "subjectaccessreviews",
        "subjectaccessreview",
    ),
    ReviewType(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
        "selfsubjectrulesreview",
    ),
    ReviewType("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", "tokenreview"),
    ReviewType(
        "authentication.k8s.io",
        "v1",
        "SelfSubjectReview",
        "selfsubjectreviews",
        "selfsubjectreview",
    ),
)
