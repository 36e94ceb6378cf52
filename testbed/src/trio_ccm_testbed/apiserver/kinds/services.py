"""core/v1 Service: its strategy (upstream's service REST and validation) and the allocator
of cluster IPs and node ports.

Invariant: an IP or node port is in `ServiceAllocator.ips`/`ports` exactly while a stored
Service holds it; a failed or dry-run write gives back what it took.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Mapping
from typing import Any, ClassVar

from trio_ccm_testbed.apiserver import fielderrors as fe
from trio_ccm_testbed.apiserver.fielderrors import FieldError
from trio_ccm_testbed.apiserver.kinds.base import (
    Obj,
    ResourceType,
    Strategy,
    get_path,
    is_int,
    messages,
)
from trio_ccm_testbed.apiserver.patch import MergeList

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
        ips = spec.get("clusterIPs")
        headless = spec.get("clusterIP") == "None" or (
            isinstance(ips, list) and bool(ips) and ips[0] == "None"
        )
        if headless and kind in ("LoadBalancer", "NodePort"):
            # kube-apiserver's ValidateService: a headless Service has no address to expose.
            errs.append(
                fe.invalid(
                    "spec.clusterIPs[0]", "None", f"may not be set to 'None' for {kind} services"
                )
            )
        ports = spec.get("ports") or []
        if not isinstance(ports, list):
            return [*errs, fe.invalid("spec.ports", ports, "must be a list")]
        if kind == "ExternalName":
            name = spec.get("externalName", "")
            if not name:
                errs.append(fe.required("spec.externalName"))
            else:
                errs += messages("spec.externalName", name, fe.is_dns1123_subdomain(name))
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
                errs += messages(f"{path}.name", name, fe.is_dns1123_label(name))
                if name in names:
                    errs.append(fe.duplicate(f"{path}.name", name))
                names.add(name)
            number = port.get("port")
            if not is_int(number) or not 1 <= number <= 65535:
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
            if is_int(target) and not 1 <= target <= 65535:
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
                elif not is_int(node_port) or not 1 <= node_port <= 65535:
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
                errs += messages(
                    "spec.loadBalancerClass", lb_class, fe.is_qualified_name(str(lb_class))
                )
        ip = spec.get("clusterIP", "")
        if ip and ip != "None" and fe.is_valid_ip(str(ip)):
            errs.append(fe.invalid("spec.clusterIPs[0]", ip, "must be a valid IP address"))
        errs += self._validate_status(obj)
        return errs

    def _validate_status(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        ingress = get_path(obj, "status", "loadBalancer", "ingress") or []
        for i, entry in enumerate(ingress if isinstance(ingress, list) else []):
            path = f"status.loadBalancer.ingress[{i}]"
            if not isinstance(entry, dict):
                errs.append(fe.invalid(path, entry, "must be an object"))
                continue
            ip, host = entry.get("ip", ""), entry.get("hostname", "")
            if ip:
                errs += messages(f"{path}.ip", ip, fe.is_valid_ip(str(ip)))
            if host:
                msgs = fe.is_dns1123_subdomain(str(host))
                errs += messages(f"{path}.hostname", host, msgs)
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


def types(allocator: ServiceAllocator) -> list[ResourceType]:
    """core/v1 services."""
    return [
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
    ]
