"""Floating IPs for Service load balancers, as OCCM handles them (openstack-ccm-study §1.2.1
step 8 and §1.2.6):

- the floating IP already on the VIP port is reused;
- `spec.loadBalancerIP` adopts that floating IP when it is free (refused, naming it, when it
  is on another port), or asks Neutron for that address;
- otherwise one is created on the floating network (class > annotation > config; else the
  first `router:external` network), on `floating-subnet-id` or the first subnet matching
  `floating-subnet` (glob, `~regex`, `!` negates) / `floating-subnet-tags` (`a,b` any,
  `&a,b` all, `!` negates), described `Floating IP for Kubernetes external service <ns>/<name>
  from cluster <cluster>` (OCCM's ownership mark) followed, when the cluster identity is
  known, by ` [trio-ccm owner <identity>]` (ours: the leak sweep finds only this cluster's);
- on deletion or an internal switch, only a floating IP with OCCM's description is deleted,
  and never under `keep-floatingip` (it is detached, and our owner mark removed so that the
  sweep leaves it alone); any other is detached.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from trio_ccm.cloud.openstack.lbconfig import FIP_DESCRIPTION, LbPlan
from trio_ccm.cloud.provider import OwnedLoadBalancer, ServiceInfo, ServiceRefused
from trio_ccm.errors import CcmError
from trio_ccm.logs import get_logger

if TYPE_CHECKING:
    from trio_ccm.cloud.openstack.octavia import Octavia

__all__ = ["FloatingIps", "subnet_matches"]

log = get_logger("trio_ccm.cloud.openstack.floatingips")

_OWNER_MARK: Final = " [trio-ccm owner {}]"
_DESC_RE: Final = re.compile(
    re.escape(FIP_DESCRIPTION) + r" (?P<ns>[^/ ]+)/(?P<name>\S+) from cluster (?P<cluster>\S+)"
)


def subnet_matches(subnet: Mapping[str, Any], pattern: str, tags: str) -> bool:
    """OCCM's floating-subnet (glob or `~regex`, `!` negates) and floating-subnet-tags
    (`a,b` any, `&a,b` all, `!` negates) matchers; empty ones match everything."""
    if pattern:
        negate = pattern.startswith("!")
        text = pattern[1:] if negate else pattern
        name = str(subnet.get("name") or "")
        hit = (
            bool(re.search(text[1:], name))
            if text.startswith("~")
            else fnmatch.fnmatchcase(name, text)
        )
        if hit == negate:
            return False
    if tags:
        negate = tags.startswith("!")
        text = tags[1:] if negate else tags
        every = text.startswith("&")
        wanted = {t.strip() for t in text.lstrip("&").split(",") if t.strip()}
        have = set(subnet.get("tags") or [])
        hit = wanted <= have if every else bool(wanted & have)
        if hit == negate:
            return False
    return True


class FloatingIps:
    def __init__(self, octavia: Octavia, *, identity: str) -> None:
        self.octavia = octavia
        self.identity = identity
        self._external: str | None = None  # the autodetected floating network, once found

    def description(self, p: LbPlan) -> str:
        return p.fip_description + (_OWNER_MARK.format(self.identity) if self.identity else "")

    @staticmethod
    def ours(fip: Mapping[str, Any]) -> bool:
        return str(fip.get("description") or "").startswith(FIP_DESCRIPTION)

    async def ensure(self, p: LbPlan, port_id: str, *, owned: bool, service: ServiceInfo) -> str:
        """The floating IP address of the VIP port `port_id` (made or adopted), or "" when
        no floating network is known (the Service then gets the VIP, as OCCM's
        LoadBalancerForcedInternal)."""
        attached = await self.octavia.floating_ips(port_id=port_id)
        if attached:
            return str(attached[0]["floating_ip_address"])
        if not owned:
            raise CcmError(
                f"Service {service.key}: the shared load balancer has no floating IP yet; "
                "only the Service that owns it can attach one"
            )
        if p.loadbalancer_ip:
            found = await self.octavia.floating_ips(floating_ip_address=p.loadbalancer_ip)
            if found:
                fip = found[0]
                if fip.get("port_id") and fip.get("port_id") != port_id:
                    raise ServiceRefused(
                        f"Service {service.key}: spec.loadBalancerIP {p.loadbalancer_ip} is a "
                        f"floating IP already on port {fip['port_id']}; free it or change the "
                        "Service"
                    )
                await self.octavia.update_floating_ip(str(fip["id"]), {"port_id": port_id})
                log.info("openstack.fip-adopted", service=service.key, address=p.loadbalancer_ip)
                return p.loadbalancer_ip
        network = p.floating_network_id or await self._autodetect()
        if not network:
            log.warning(
                "openstack.lb-forced-internal",
                service=service.key,
                reason="no floating network is configured or found",
            )
            return ""
        body: dict[str, Any] = {
            "floating_network_id": network,
            "port_id": port_id,
            "description": self.description(p),
        }
        if p.loadbalancer_ip:
            body["floating_ip_address"] = p.loadbalancer_ip
        subnets: Sequence[str] = [p.floating_subnet_id] if p.floating_subnet_id else []
        if not subnets and (p.floating_subnet or p.floating_subnet_tags):
            subnets = [
                str(s["id"])
                for s in await self.octavia.subnets(network_id=network)
                if subnet_matches(s, p.floating_subnet, p.floating_subnet_tags)
            ]
            if not subnets:
                raise ServiceRefused(
                    f"Service {service.key}: no subnet of floating network {network} matches "
                    f"floating-subnet {p.floating_subnet!r} / floating-subnet-tags "
                    f"{p.floating_subnet_tags!r}; fix the annotation or the config"
                )
        if subnets:
            body["subnet_id"] = subnets[0]
        fip = await self.octavia.create_floating_ip(body)
        log.info("openstack.fip-created", service=service.key, address=fip["floating_ip_address"])
        return str(fip["floating_ip_address"])

    async def _autodetect(self) -> str:
        if self._external is None:
            nets = await self.octavia.networks(**{"router:external": "true"})
            self._external = str(nets[0]["id"]) if nets else ""
        return self._external

    async def release(self, port_id: str, *, keep: bool) -> None:
        """Before the VIP port goes (deletion, internal switch): delete the floating IP on
        it if we made it and it is not kept; else detach it (and disown a kept one)."""
        for fip in await self.octavia.floating_ips(port_id=port_id):
            if self.ours(fip) and not keep:
                await self.octavia.delete_floating_ip(str(fip["id"]))
                log.info("openstack.fip-deleted", address=fip.get("floating_ip_address"))
                continue
            body: dict[str, Any] = {"port_id": None}
            mark = _OWNER_MARK.format(self.identity)
            if self.identity and mark in str(fip.get("description") or ""):
                body["description"] = str(fip["description"]).replace(mark, "")
            await self.octavia.update_floating_ip(str(fip["id"]), body)
            log.info("openstack.fip-detached", address=fip.get("floating_ip_address"), kept=keep)

    async def leaked(self, cluster: str) -> list[OwnedLoadBalancer]:
        """Our floating IPs left on no port (their load balancer went without them)."""
        if not self.identity:
            return []
        mark = _OWNER_MARK.format(self.identity)
        out = []
        for fip in await self.octavia.floating_ips():
            text = str(fip.get("description") or "")
            match = _DESC_RE.match(text)
            if fip.get("port_id") or mark not in text or match is None:
                continue
            if match.group("cluster") != cluster:
                continue
            out.append(
                OwnedLoadBalancer(f"floatingip/{fip['id']}", match.group("ns"), match.group("name"))
            )
        return out
