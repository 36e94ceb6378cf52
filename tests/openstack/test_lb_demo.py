"""`trio-ccm demo --cloud=openstack --exit-when-done`, in process on the session's OpenStack
world: the demo's own code (`_open_world`, `_demo_ccm`: its fleet of Nova servers, its
cloud.conf, the CCM with the openstack provider, its LoadBalancer Services and its finish
line) with the world the fixture started instead of a second one. The EXTERNAL-IPs it
reports must be the floating IPs Neutron holds on the Octavia VIP ports, and since they are
not on loopback (the world's external network is 172.24.4.0/24), the demo says it sends
them no traffic. What the demo leaves in the shared world (servers, routes, load balancers,
floating IPs) is removed after."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import prometheus_client
import pytest
import trio

from tests.openstack.lbworld import CUT_REPLICA_WARNINGS, sdk_call
from trio_ccm.cli.process import Shutdown, aclose_provider
from trio_ccm_testbed import cli
from trio_ccm_testbed.openstack.bootstrap import EXTERNAL_CIDR

pytestmark = CUT_REPLICA_WARNINGS

CLUSTER = "lbdemo"
SERVICES = 1  # each is one more load balancer for the one serial Octavia worker


async def no_signals() -> AsyncIterator[int]:
    await trio.sleep_forever()
    yield 0  # pragma: no cover - never reached


def floating_ips_on(conn: Any, port_id: str) -> list[Any]:
    return list(conn.network.ips(port_id=port_id))


def remove_leftovers(world: Any, servers: list[str]) -> None:
    """Delete what the demo made in the shared world: its load balancers (cascade) with
    their floating IPs, its routes on the cluster router, its servers."""
    conn = world.sdk(admin=True)
    prefix = f"kube_service_{CLUSTER}_"
    for lb in list(conn.load_balancer.load_balancers()):
        if not (lb.name or "").startswith(prefix):
            continue
        for fip in conn.network.ips(port_id=lb.vip_port_id):
            conn.network.delete_ip(fip.id)
        if lb.provisioning_status not in ("PENDING_DELETE", "DELETED"):
            conn.load_balancer.delete_load_balancer(lb.id, cascade=True)
    addresses = set()
    for server_id in servers:
        for port in conn.network.ports(device_id=server_id):
            addresses |= {ip["ip_address"] for ip in port.fixed_ips}
    router = conn.network.get_router(world.router_id)
    ours = [r for r in router.routes or [] if r["nexthop"] in addresses]
    if ours:
        conn.network.remove_extra_routes_from_router(router, body={"router": {"routes": ours}})
    for server_id in servers:
        world.delete_server(server_id)


async def test_demo_gives_its_services_floating_ips(
    openstack: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo finishes (every Node initialised and routed, every Service with an
    EXTERNAL-IP); each EXTERNAL-IP is the floating IP on its Service's Octavia VIP port, in
    the external network, and the demo says it sends it no traffic (not loopback)."""
    kubeconfig = tmp_path / "demo.kubeconfig"
    args = cli._demo_parser().parse_args(
        [
            "--cloud=openstack",
            "--nodes=2",
            f"--services={SERVICES}",
            f"--kubeconfig-out={kubeconfig}",
            "--exit-when-done",
        ]
    )
    settings = cli._demo_settings(args, [f"--cluster-name={CLUSTER}"])
    fleets: list[Any] = []
    try:
        with trio.fail_after(900):
            async with trio.open_nursery() as nursery:
                world = await cli._open_world(
                    nursery, args, nodes=args.nodes, kubeconfig=str(kubeconfig), openstack=openstack
                )
                fleets.append(world.testbed.cloud)
                provider = world.provider("trio-ccm-demo")
                try:
                    progress = await cli._demo_ccm(
                        settings,
                        provider,
                        world,
                        prometheus_client.CollectorRegistry(),
                        no_signals(),
                        Shutdown(),
                        args,
                    )
                finally:
                    await aclose_provider(provider)
                nursery.cancel_scope.cancel()
        assert progress.done.is_set()
        census = progress.census
        assert census is not None
        assert census.load_balancers == SERVICES
        conn = openstack.sdk(admin=True)
        lbs = await sdk_call(
            lambda: {
                lb.name: lb
                for lb in conn.load_balancer.load_balancers()
                if (lb.name or "").startswith(f"kube_service_{CLUSTER}_default_")
            }
        )
        external = ipaddress.ip_network(EXTERNAL_CIDR)
        assert len(census.external_ips) == SERVICES
        for key, address in census.external_ips.items():
            lb = lbs[f"kube_service_{CLUSTER}_{key.replace('/', '_')}"]
            fips = await sdk_call(partial(floating_ips_on, conn, lb.vip_port_id))
            assert [f.floating_ip_address for f in fips] == [address]
            assert address != lb.vip_address
            assert ipaddress.ip_address(address) in external
        out = capsys.readouterr().out
        for key, address in census.external_ips.items():
            assert (
                f"  {key}  {address}: not in 127.0.0.0/8: the demo sends traffic to loopback only"
                in out
            )
    finally:
        servers = [s.id for fleet in fleets for s in fleet.instances()]
        await trio.to_thread.run_sync(lambda: remove_leftovers(openstack, servers))
