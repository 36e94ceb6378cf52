"""Plumbing of the load-balancer tests (tests/openstack/test_lb_*.py): the emulator beside the
`openstack` fixture's real Octavia and Neutron, trio-ccm replicas with the openstack
provider, and openstacksdk reads of exactly what exists (as the admin sees it, so nothing
hides behind the ccm user's view).

The real services answer over loopback on real time: every wait is a condition polled
with a deadline (`until`), never a fixed sleep.
"""

from __future__ import annotations

import datetime as dt
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import trio
from prometheus_client import CollectorRegistry

from trio_ccm.cloud.openstack.config import parse_cloud_config
from trio_ccm.cloud.openstack.provider import OpenStackProvider
from trio_ccm.supervisor import Serving
from trio_ccm.testing import make_node, make_service
from trio_ccm.testing.harness import run_ccm
from trio_ccm_testbed.apiserver import ApiServer

# A replica cancelled at the end of its block with a request to OpenStack in flight leaves
# httpcore's socket to the garbage collector (ResourceWarning), not a fault of the test:
# each load-balancer test module's `pytestmark`.
CUT_REPLICA_WARNINGS = pytest.mark.filterwarnings(
    "ignore:unclosed <socket:ResourceWarning",
    "ignore::pytest.PytestUnraisableExceptionWarning",
)

CONTROLLERS = "service-lb-controller"
FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
POLL_S = 0.25


async def until(check: Callable[[], Any], *, what: str = "") -> None:
    """Return once `check()` (sync, or a coroutine run in a thread when it is blocking
    openstacksdk) holds; the caller's `trio.fail_after` bounds the wait."""
    while True:
        result = check()
        if isinstance(result, Awaitable):
            result = await result
        if result:
            return
        await trio.sleep(POLL_S)


async def sdk_call(fn: Callable[[], Any]) -> Any:
    """A blocking openstacksdk call, off the Trio thread."""
    return await trio.to_thread.run_sync(fn)


async def settled_lb(cluster: LbCluster, service: str) -> dict[str, Any]:
    """The Service's load balancer once Octavia holds it ACTIVE (a status can show before
    the last child's update, e.g. the members of a Node added meanwhile, has settled)."""
    while True:
        lb = await sdk_call(lambda: cluster.read_lb(service))
        if lb is not None and lb["status"] == "ACTIVE":
            return dict(lb)
        await trio.sleep(POLL_S)


@dataclass
class LbCluster:
    """The emulator, a cloud.conf for the ccm user, and the `openstack` world."""

    world: Any
    api: ApiServer
    http: httpx.AsyncClient
    conf: Path
    cluster: str
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    node_ips: dict[str, str] = field(default_factory=dict)

    # -- Kubernetes side ------------------------------------------------------------------
    def add_nodes(self, count: int, *, start: int = 0, **labels: str) -> list[str]:
        """Nodes with an InternalIP on the fixture's subnet (no servers: Octavia's members
        need only an address on the member subnet)."""
        names = []
        base = self.world.subnet_cidr.rsplit(".", 1)[0]
        for i in range(start, start + count):
            name = f"{self.cluster}-node-{i}"
            ip = f"{base}.{100 + i}"
            self.node_ips[name] = ip
            manifest = make_node(
                name,
                uninitialized=False,
                labels=labels,
                addresses=[{"type": "InternalIP", "address": ip}],
            )
            self.api.create(manifest)
            names.append(name)
        return names

    def create_service(
        self, name: str, *, node_ports: tuple[int, ...] = (30080,), **kw: Any
    ) -> dict[str, Any]:
        ports = kw.pop(
            "ports",
            [
                {"name": f"p{i}", "port": 80 + i, "protocol": "TCP", "nodePort": np}
                for i, np in enumerate(node_ports)
            ],
        )
        created: dict[str, Any] = self.api.create(make_service(name, ports=ports, **kw))
        return created

    def service(self, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.api.get("v1", "Service", name, namespace="default")
        except Exception:  # the emulator's not-found error
            return None
        return found

    def gone(self, name: str) -> bool:
        return self.service(name) is None

    def ingress(self, name: str) -> list[dict[str, Any]]:
        svc = self.service(name) or {}
        return list(svc.get("status", {}).get("loadBalancer", {}).get("ingress") or [])

    async def patch(self, name: str, body: dict[str, Any]) -> None:
        response = await self.http.patch(
            f"/api/v1/namespaces/default/services/{name}",
            json=body,
            headers={"content-type": "application/merge-patch+json"},
        )
        response.raise_for_status()

    async def delete(self, name: str) -> None:
        response = await self.http.delete(f"/api/v1/namespaces/default/services/{name}")
        response.raise_for_status()

    async def events(self, reason: str = "") -> list[dict[str, Any]]:
        listing = (await self.http.get("/api/v1/namespaces/default/events")).json()
        return [e for e in listing.get("items", []) if not reason or e.get("reason") == reason]

    # -- OpenStack side -------------------------------------------------------------------
    def lb_name(self, service: str) -> str:
        return f"kube_service_{self.cluster}_default_{service}"

    def read_lb(self, service: str) -> dict[str, Any] | None:
        """What Octavia holds for the Service's load balancer, read whole (admin)."""
        conn = self.world.sdk(admin=True)
        found = [
            lb
            for lb in conn.load_balancer.load_balancers(name=self.lb_name(service))
            if lb.provisioning_status not in ("DELETED", "PENDING_DELETE")
        ]
        for lb in found:
            try:
                return read_tree(conn, lb.id)
            except requests.HTTPError as exc:
                # Deleted between the listing and the read (a replaced load balancer of
                # the same name goes while its successor is made): read the next one.
                if exc.response is None or exc.response.status_code != 404:
                    raise
        return None

    def floating_ips(self, service: str) -> list[dict[str, Any]]:
        conn = self.world.sdk(admin=True)
        marker = f"default/{service} from cluster {self.cluster}"
        return [dict(f.to_dict()) for f in conn.network.ips() if marker in (f.description or "")]

    def leftovers(self, service: str) -> list[str]:
        """Everything named or described for `service` that still exists."""
        conn = self.world.sdk(admin=True)
        name = self.lb_name(service)
        left = [
            f"lb {lb.id} {lb.provisioning_status}"
            for lb in conn.load_balancer.load_balancers()
            if lb.name == name
        ]
        left += [
            f"listener {x.id}"
            for x in conn.load_balancer.listeners()
            if (x.name or "").endswith(name)
        ]
        left += [
            f"pool {x.id}" for x in conn.load_balancer.pools() if (x.name or "").endswith(name)
        ]
        left += [
            f"monitor {x.id}"
            for x in conn.load_balancer.health_monitors()
            if (x.name or "").endswith(name)
        ]
        left += [f"fip {f['floating_ip_address']}" for f in self.floating_ips(service)]
        left += [
            f"sg {g.id}"
            for g in conn.network.security_groups()
            if (g.name or "").startswith("lb-sg-") and g.name.endswith(f"-default-{service}")
        ]
        return left


def _raw(conn: Any, path: str, key: str, **params: str) -> list[dict[str, Any]]:
    answer = conn.load_balancer.get(path, params=params)
    answer.raise_for_status()
    return list(answer.json()[key])


def read_tree(conn: Any, lb_id: str) -> dict[str, Any]:
    """The load balancer and its children as Octavia answers them (raw JSON)."""
    lb = conn.load_balancer.get(f"/lbaas/loadbalancers/{lb_id}").json()["loadbalancer"]
    listeners = _raw(conn, "/lbaas/listeners", "listeners", loadbalancer_id=lb_id)
    pools = {p["id"]: p for p in _raw(conn, "/lbaas/pools", "pools", loadbalancer_id=lb_id)}
    out: dict[str, Any] = {
        "id": lb["id"],
        "name": lb["name"],
        "status": lb["provisioning_status"],
        "description": lb["description"],
        "tags": sorted(lb.get("tags") or []),
        "vip_address": lb["vip_address"],
        "vip_port_id": lb["vip_port_id"],
        "listeners": {},
        "pools": sorted(p["name"] for p in pools.values()),
    }
    for listener in listeners:
        pool = pools.get(listener.get("default_pool_id") or "")
        entry: dict[str, Any] = {
            "name": listener["name"],
            "status": listener["provisioning_status"],
            "allowed_cidrs": sorted(listener.get("allowed_cidrs") or []),
            "connection_limit": listener["connection_limit"],
            "insert_headers": dict(listener.get("insert_headers") or {}),
            "timeouts": (
                listener.get("timeout_client_data"),
                listener.get("timeout_member_connect"),
                listener.get("timeout_member_data"),
                listener.get("timeout_tcp_inspect"),
            ),
            "tags": sorted(listener.get("tags") or []),
            "pool": None,
        }
        if pool is not None:
            members = _raw(conn, f"/lbaas/pools/{pool['id']}/members", "members")
            monitor = (
                conn.load_balancer.get(f"/lbaas/healthmonitors/{pool['healthmonitor_id']}").json()[
                    "healthmonitor"
                ]
                if pool.get("healthmonitor_id")
                else None
            )
            entry["pool"] = {
                "name": pool["name"],
                "status": pool["provisioning_status"],
                "protocol": pool["protocol"],
                "lb_algorithm": pool["lb_algorithm"],
                "session_persistence": pool.get("session_persistence"),
                "members": sorted(
                    (m["name"], m["address"], m["protocol_port"], m.get("monitor_port"))
                    for m in members
                ),
                "monitor": None
                if monitor is None
                else {
                    k: monitor.get(k)
                    for k in (
                        "name",
                        "type",
                        "delay",
                        "timeout",
                        "max_retries",
                        "max_retries_down",
                        "url_path",
                        "http_method",
                        "expected_codes",
                    )
                },
            }
        out["listeners"][(listener["protocol"], listener["protocol_port"])] = entry
    return out


def wait_lb_gone(conn: Any, lb_id: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while conn.load_balancer.find_load_balancer(lb_id, ignore_missing=True) is not None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"load balancer {lb_id} not gone in {timeout_s} s")
        time.sleep(0.5)


@asynccontextmanager
async def open_lb_cluster(
    world: Any, tmp_path: Path, cluster: str, **lb_keys: str
) -> AsyncIterator[LbCluster]:
    # Its own seed per cluster directory: each emulator's kube-system Namespace has its own
    # UID, the identity trio-ccm tags load balancers with (two clusters never share one).
    api = ApiServer(seed=zlib.crc32(f"{tmp_path.name}/{cluster}".encode()))
    await trio.Path(tmp_path).mkdir(parents=True, exist_ok=True)
    keys = {"subnet-id": world.subnet_id, "floating-network-id": world.external_network_id}
    keys.update(lb_keys)
    conf = world.write_cloud_conf(tmp_path / "cloud.conf", extra={"LoadBalancer": keys})
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://emulator") as http:
        yield LbCluster(world, api, http, conf, cluster)


def kube_system_uid(c: LbCluster) -> str:
    """The cluster's identity, as trio-ccm reads it."""
    return str(c.api.get("v1", "Namespace", "kube-system")["metadata"]["uid"])


def provider_for(c: LbCluster, *, identity: str = "") -> OpenStackProvider:
    return OpenStackProvider(
        parse_cloud_config(c.conf.read_bytes(), source=str(c.conf)), cluster_identity=identity
    )


@asynccontextmanager
async def running(
    c: LbCluster, *flags: str, provider: OpenStackProvider | None = None
) -> AsyncIterator[Serving]:
    """A trio-ccm replica with the openstack provider against the emulator and the real
    OpenStack, as `trio-ccm --cloud-provider=openstack` runs."""
    own = provider is None
    if provider is None:
        provider = provider_for(c)
    try:
        async with run_ccm(
            c.api,
            provider,
            f"--controllers={CONTROLLERS}",
            f"--cluster-name={c.cluster}",
            *flags,
            registry=CollectorRegistry(),  # one per replica: metrics are registered anew
            identity=f"ccm-{c.cluster}",
            now=lambda: dt.datetime.now(dt.UTC),
        ) as serving:
            yield serving
    finally:
        if own:
            await provider.aclose()


def lb_annotations(**kw: str) -> Mapping[str, str]:
    return {f"loadbalancer.openstack.org/{k.replace('_', '-')}": v for k, v in kw.items()}
