"""`manage-security-groups = true` against real Neutron: a Service's group lets the member
subnet in on its NodePort (and the health-check port for Local), is put on the Node's
server port, and is taken off and deleted with the Service, leaving no group or rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.openstack.lbworld import CUT_REPLICA_WARNINGS, open_lb_cluster, running, sdk_call, until
from trio_ccm.testing import make_node

pytestmark = CUT_REPLICA_WARNINGS


async def test_security_group_follows_the_service(openstack: Any, tmp_path: Path) -> None:
    """The group `lb-sg-<uid>-<ns>-<name>` holds ingress rules for the NodePort and the
    health-check port from the subnet's CIDR, sits on the Node's port, and is gone with the
    Service."""
    server = await sdk_call(lambda: openstack.boot_server("lbsg-node"))
    try:
        conn = openstack.sdk(admin=True)
        ports = await sdk_call(lambda: list(conn.network.ports(device_id=server["id"])))
        address = ports[0].fixed_ips[0]["ip_address"]
        async with open_lb_cluster(
            openstack, tmp_path, "lbsg", **{"manage-security-groups": "true"}
        ) as c:
            c.api.create(
                make_node(
                    "lbsg-node",
                    uninitialized=False,
                    provider_id=f"openstack:///{server['id']}",
                    addresses=[{"type": "InternalIP", "address": address}],
                )
            )
            with trio.fail_after(600):
                async with running(c):
                    svc = c.create_service(
                        "web",
                        node_ports=(30480,),
                        externalTrafficPolicy="Local",
                        healthCheckNodePort=32480,
                    )
                    await until(lambda: c.ingress("web"))
                    name = f"lb-sg-{svc['metadata']['uid']}-default-web"
                    group = await sdk_call(lambda: conn.network.find_security_group(name))
                    assert group is not None
                    rules = await sdk_call(
                        lambda: sorted(
                            (r.protocol, r.port_range_min, r.remote_ip_prefix)
                            for r in conn.network.security_group_rules(
                                security_group_id=group.id, direction="ingress"
                            )
                            if r.protocol
                        )
                    )
                    assert rules == [
                        ("tcp", 30480, openstack.subnet_cidr),
                        ("tcp", 32480, openstack.subnet_cidr),
                    ]
                    port = await sdk_call(lambda: conn.network.get_port(ports[0].id))
                    assert group.id in port.security_group_ids
                    await c.delete("web")
                    await until(lambda: c.service("web") is None)
            assert await sdk_call(lambda: conn.network.find_security_group(name)) is None
            port = await sdk_call(lambda: conn.network.get_port(ports[0].id))
            assert group.id not in port.security_group_ids
            assert await sdk_call(lambda: c.leftovers("web")) == []
    finally:
        await sdk_call(lambda: openstack.delete_server(server["id"]))
