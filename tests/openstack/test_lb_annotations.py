"""Annotations through the real controller against real Octavia: each Service's load
balancer is read back whole with openstacksdk (ETP Local's HTTP /healthz monitor, source
ranges, timeouts and limits, x-forwarded-for, UDP beside TCP with monitors, proxy protocol
and ipMode Proxy, internal load balancers with the VIP as address), a meaningless value is
one Warning Event and nothing in Octavia, and deleting them all leaves nothing."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import trio

from tests.openstack.lbworld import (
    CUT_REPLICA_WARNINGS,
    lb_annotations,
    open_lb_cluster,
    running,
    sdk_call,
    until,
)
from trio_ccm.cloud.openstack.lbconfig import INTERNAL

SERVICES = ("local", "xff", "udp", "proxy")

pytestmark = CUT_REPLICA_WARNINGS


async def test_annotations_shape_the_load_balancers(openstack: Any, tmp_path: Path) -> None:
    """Four Services with different annotations get exactly what OCCM would build (plus the
    Local monitor OCCM leaves out); a bad boolean is refused with an Event; all deleted
    leave nothing."""
    async with open_lb_cluster(openstack, tmp_path, "lbann") as c:
        nodes = c.add_nodes(2)
        with trio.fail_after(900):
            async with running(c):
                # annotations that act on different parts share a Service (one load
                # balancer fewer each for the world's one serial Octavia worker): Local's
                # monitor and members beside the ranges, limits, timeouts and algorithm
                c.create_service(
                    "local",
                    node_ports=(30181,),
                    externalTrafficPolicy="Local",
                    healthCheckNodePort=32181,
                    loadBalancerSourceRanges=["10.9.0.0/16", "192.0.2.7/32"],
                    sessionAffinity="ClientIP",
                    annotations=lb_annotations(
                        connection_limit="100",
                        timeout_client_data="1000",
                        timeout_member_connect="2000",
                        timeout_member_data="3000",
                        timeout_tcp_inspect="4",
                        lb_method="SOURCE_IP",
                    ),
                )
                # x-forwarded-for's HTTP listener on an internal load balancer
                c.create_service(
                    "xff",
                    node_ports=(30183,),
                    annotations={INTERNAL: "true", **lb_annotations(x_forwarded_for="true")},
                )
                c.create_service(
                    "udp",
                    ports=[
                        {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30184},
                        {"name": "tcp", "port": 53, "protocol": "TCP", "nodePort": 30185},
                    ],
                    annotations=lb_annotations(
                        enable_health_monitor="true", health_monitor_delay="7"
                    ),
                )
                c.create_service(
                    "proxy", node_ports=(30186,), annotations=lb_annotations(proxy_protocol="true")
                )
                c.create_service(
                    "bad", node_ports=(30188,), annotations=lb_annotations(keep_floatingip="yes")
                )
                for name in SERVICES:
                    await until(partial(c.ingress, name), what=name)
                trees = {n: await sdk_call(partial(c.read_lb, n)) for n in SERVICES}
                ips = {n: c.node_ips[n] for n in nodes}

                local = trees["local"]["listeners"][("TCP", 80)]["pool"]
                assert local["monitor"] | {"name": ""} == {
                    "name": "",
                    "type": "HTTP",
                    "delay": 5,
                    "timeout": 3,
                    "max_retries": 1,
                    "max_retries_down": 3,
                    "url_path": "/healthz",
                    "http_method": "GET",
                    "expected_codes": "200",
                }
                assert local["members"] == sorted((n, ips[n], 30181, 32181) for n in nodes)

                ranges = trees["local"]["listeners"][("TCP", 80)]
                assert ranges["allowed_cidrs"] == ["10.9.0.0/16", "192.0.2.7/32"]
                assert ranges["connection_limit"] == 100
                assert ranges["timeouts"] == (1000, 2000, 3000, 4)
                assert ranges["pool"]["lb_algorithm"] == "SOURCE_IP"
                assert ranges["pool"]["session_persistence"]["type"] == "SOURCE_IP"

                xff = trees["xff"]["listeners"][("HTTP", 80)]
                assert xff["insert_headers"] == {"X-Forwarded-For": "true"}
                assert xff["pool"]["protocol"] == "HTTP"

                udp = trees["udp"]["listeners"]
                assert sorted(udp) == [("TCP", 53), ("UDP", 53)]
                assert udp[("UDP", 53)]["pool"]["monitor"]["type"] == "UDP-CONNECT"
                assert udp[("TCP", 53)]["pool"]["monitor"]["type"] == "TCP"
                assert udp[("TCP", 53)]["pool"]["monitor"]["delay"] == 7

                proxy = trees["proxy"]["listeners"][("TCP", 80)]["pool"]
                assert proxy["protocol"] == "PROXY"
                assert c.ingress("proxy")[0]["ipMode"] == "Proxy"

                assert c.ingress("xff") == [{"ip": trees["xff"]["vip_address"], "ipMode": "VIP"}]
                assert await sdk_call(lambda: c.floating_ips("xff")) == []

                refused = [
                    e
                    for e in await c.events("SyncLoadBalancerFailed")
                    if e["involvedObject"]["name"] == "bad"
                ]
                assert refused
                assert "keep-floatingip" in refused[0]["message"]
                assert await sdk_call(lambda: c.read_lb("bad")) is None

                for name in (*SERVICES, "bad"):
                    await c.delete(name)
                for name in (*SERVICES, "bad"):
                    await until(partial(c.gone, name), what=name)
                for name in SERVICES:
                    assert await sdk_call(partial(c.leftovers, name)) == []
