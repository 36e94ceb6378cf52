"""`manage-security-groups = true`: one Neutron security group per Service, as OCCM's
`loadbalancer_sg.go` makes it (openstack-ccm-study §1.2.5).

The group is `lb-sg-<service uid>-<namespace>-<name>`, described `Security Group for
<ns>/<name> Service LoadBalancer in cluster <cluster>`. Its rules let the member subnet's
CIDR in on every NodePort (the port's protocol) and, for `externalTrafficPolicy: Local`, on
the TCP `healthCheckNodePort`. It is added to the Nodes' ports that carry the member
addresses (ports with port security off are left alone). Deletion takes it off every port
and deletes it.

Beyond OCCM: the Nodes' ports are listed in one call for all Nodes (`device_id` repeated),
not one per Node, and a port is written only when it lacks the group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from trio_ccm.cloud.openstack.lbconfig import LbPlan, Member, _cut
from trio_ccm.cloud.openstack.octavia import NET, Api
from trio_ccm.cloud.provider import NodeInfo, ServiceInfo
from trio_ccm.logs import get_logger

__all__ = ["SecurityGroups", "group_name"]

log = get_logger("trio_ccm.cloud.openstack.secgroups")

_PROVIDER_ID: Final = "openstack://"


def group_name(service: ServiceInfo) -> str:
    return _cut(f"lb-sg-{service.uid}-{service.namespace}-{service.name}")


def _server_id(node: NodeInfo) -> str:
    pid = node.provider_id
    if not pid.startswith(_PROVIDER_ID):
        return ""
    return pid.rsplit("/", 1)[-1]


class SecurityGroups:
    def __init__(self, api: Api) -> None:
        self.api = api

    async def _find(self, name: str) -> dict[str, Any] | None:
        groups = await self.api.list(
            NET, "/v2.0/security-groups", "security_groups", params={"name": name}
        )
        found = [g for g in groups if isinstance(g, dict)]
        return found[0] if found else None

    async def ensure(
        self,
        p: LbPlan,
        service: ServiceInfo,
        nodes: Sequence[NodeInfo],
        wanted: Mapping[int, tuple[Member, ...]],
    ) -> None:
        name = group_name(service)
        group = await self._find(name)
        if group is None:
            answer = await self.api.request(
                NET,
                "POST",
                "/v2.0/security-groups",
                json={
                    "security_group": {
                        "name": name,
                        "description": f"Security Group for {service.key} Service "
                        f"LoadBalancer in cluster {p.cluster}",
                    }
                },
            )
            group = answer["security_group"]
        group_id = str(group["id"])
        cidr = ""
        if p.member_subnet_id:
            subnet = await self.api.request(NET, "GET", f"/v2.0/subnets/{p.member_subnet_id}")
            cidr = str(subnet["subnet"]["cidr"])
        ether = "IPv6" if p.ipv6 else "IPv4"
        want: set[tuple[str, int, str]] = set()
        for port in p.ports:
            if port.node_port:
                want.add((port.service_protocol.lower(), port.node_port, cidr))
        health = service.health_check_node_port if service.external_traffic_policy == "Local" else 0
        if health:
            want.add(("tcp", health, cidr))
        rules = await self.api.list(
            NET,
            "/v2.0/security-group-rules",
            "security_group_rules",
            params={"security_group_id": group_id},
        )
        have: dict[tuple[str, int, str], str] = {}
        for rule in rules:
            if rule.get("direction") != "ingress" or not rule.get("protocol"):
                continue
            key = (
                str(rule["protocol"]),
                int(rule.get("port_range_min") or 0),
                str(rule.get("remote_ip_prefix") or ""),
            )
            have[key] = str(rule["id"])
        for key in sorted(want - set(have)):
            proto, number, prefix = key
            body: dict[str, Any] = {
                "security_group_id": group_id,
                "direction": "ingress",
                "ethertype": ether,
                "protocol": proto,
                "port_range_min": number,
                "port_range_max": number,
            }
            if prefix:
                body["remote_ip_prefix"] = prefix
            await self.api.request(
                NET, "POST", "/v2.0/security-group-rules", json={"security_group_rule": body}
            )
        for key in sorted(set(have) - want):
            await self.api.request(NET, "DELETE", f"/v2.0/security-group-rules/{have[key]}")
        addresses = {m.address for ms in wanted.values() for m in ms}
        servers = sorted({sid for n in nodes if (sid := _server_id(n))})
        if not servers:
            return
        ports = await self.api.list(NET, "/v2.0/ports", "ports", params={"device_id": servers})
        for port in ports:
            if port.get("port_security_enabled") is False:
                continue
            ips = {str(f.get("ip_address")) for f in port.get("fixed_ips") or []}
            groups = [str(g) for g in port.get("security_groups") or []]
            if ips & addresses and group_id not in groups:
                await self.api.request(
                    NET,
                    "PUT",
                    f"/v2.0/ports/{port['id']}",
                    json={"port": {"security_groups": [*groups, group_id]}},
                )
        log.info("openstack.sg-ensured", service=service.key, group=group_id)

    async def delete(self, p: LbPlan, service: ServiceInfo) -> None:
        group = await self._find(group_name(service))
        if group is None:
            return
        group_id = str(group["id"])
        ports = await self.api.list(
            NET, "/v2.0/ports", "ports", params={"security_groups": group_id}
        )
        for port in ports:
            groups = [str(g) for g in port.get("security_groups") or [] if str(g) != group_id]
            await self.api.request(
                NET, "PUT", f"/v2.0/ports/{port['id']}", json={"port": {"security_groups": groups}}
            )
        await self.api.request(NET, "DELETE", f"/v2.0/security-groups/{group_id}")
        log.info("openstack.sg-deleted", service=service.key, group=group_id)
