"""The OpenStack test world itself: it answers, its proxy's faults do what they say, the
ccm user can do what a CCM needs and no more, and stopping leaves no process."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from trio_ccm.testing.openstack import SERVICES, OpenStackWorld, unique
from trio_ccm.testing.openstack.processes import Process, group_members, listening_addresses


def _token(world: OpenStackWorld, auth: dict[str, str]) -> tuple[str, list[dict[str, Any]]]:
    """A project-scoped token and its catalog, asked of Keystone through the proxy."""
    body = {
        "auth": {
            "identity": {
                "methods": ["password"],
                "password": {
                    "user": {
                        "name": auth["username"],
                        "domain": {"name": auth["user_domain_name"]},
                        "password": auth["password"],
                    }
                },
            },
            "scope": {"project": {"id": auth["project_id"]}},
        }
    }
    answer = httpx.post(world.auth_url + "/auth/tokens", json=body, timeout=30)
    assert answer.status_code == 201, answer.text
    return answer.headers["X-Subject-Token"], answer.json()["token"]["catalog"]


def _public(catalog: list[dict[str, Any]], service: str) -> str:
    for entry in catalog:
        if entry["type"] == service:
            return next(e["url"] for e in entry["endpoints"] if e["interface"] == "public")
    raise AssertionError(f"{service} not in the catalog")


@pytest.fixture
def ccm(openstack: OpenStackWorld) -> Iterator[httpx.Client]:
    """An httpx client with the ccm user's token, as a CCM would hold it."""
    token, _ = _token(openstack, openstack.ccm_auth)
    with httpx.Client(headers={"X-Auth-Token": token}, timeout=60) as client:
        yield client


def test_catalog_names_the_proxy_and_every_service_answers(openstack: OpenStackWorld) -> None:
    """The catalog's public endpoints are the proxy's loopback ports, and each answers the
    ccm user's token through it."""
    token, catalog = _token(openstack, openstack.ccm_auth)
    ports = openstack.layout.ports
    for service in SERVICES:
        url = _public(catalog, service)
        assert urlsplit(url).hostname == "127.0.0.1"
        assert urlsplit(url).port == ports.proxy(service)
        answer = httpx.get(url, headers={"X-Auth-Token": token}, timeout=30)
        assert answer.status_code in (200, 300), (service, answer.status_code)
    assert [m for m, _ in openstack.faults.seen("identity", method="POST")] == ["POST"]


def test_every_listener_is_on_loopback(openstack: OpenStackWorld) -> None:
    """Every socket every process of the world listens on is on a loopback address."""
    listening = {name: listening_addresses(pid) for name, pid in openstack.processes().items()}
    assert listening["keystone"], listening
    addresses = {address for found in listening.values() for address, _ in found}
    assert addresses <= {"127.0.0.1", "::1"}, listening


@pytest.mark.parametrize(
    ("fault", "status", "headers", "body_start"),
    [
        pytest.param(
            {"status": 401}, 401, {"www-authenticate": "Keystone"}, b'{"error"', id="expired-token"
        ),
        pytest.param({"status": 409}, 409, {}, b'{"conflictingRequest"', id="conflict"),
        pytest.param(
            {"status": 413, "retry_after_s": 2},
            413,
            {"retry-after": "2"},
            b'{"overLimit"',
            id="413-retry-after",
        ),
        pytest.param(
            {"status": 429, "retry_after_s": 0.5},
            429,
            {"retry-after": "1"},
            b'{"overLimit"',
            id="429-retry-after-rounded-up",
        ),
        pytest.param({"status": 503}, 503, {}, b'{"computeFault"', id="5xx"),
        pytest.param(
            {"body": b"<html><body>proxy error</body></html>"},
            200,
            {"content-type": "text/html"},
            b"<html>",
            id="html-body",
        ),
    ],
)
def test_fault_answers_then_the_service_again(
    openstack: OpenStackWorld, ccm: httpx.Client, fault, status, headers, body_start
) -> None:
    """A fault answers the next matching request as configured; the one after is the
    service's real answer."""
    url = openstack.layout.public_url("compute") + "/flavors"
    openstack.faults.add("compute", method="GET", path=r"/flavors$", **fault)
    faulted = ccm.get(url)
    assert faulted.status_code == status
    for name, value in headers.items():
        assert faulted.headers[name].startswith(value)
    assert faulted.content.startswith(body_start)
    real = ccm.get(url)
    assert real.status_code == 200
    assert {f["name"] for f in real.json()["flavors"]} >= {"m1.tiny"}


def test_truncated_body_is_half_the_real_one(openstack: OpenStackWorld, ccm: httpx.Client) -> None:
    """`truncate` answers the real status with the first half of the real body."""
    url = openstack.layout.public_url("network") + "/v2.0/networks"
    whole = ccm.get(url, params={"name": openstack.network_name}).content
    openstack.faults.add("network", method="GET", path="/v2.0/networks", truncate=True)
    cut = ccm.get(url, params={"name": openstack.network_name})
    assert cut.status_code == 200
    assert cut.content == whole[: len(whole) // 2]


def test_slow_answer_is_late_and_real(openstack: OpenStackWorld, ccm: httpx.Client) -> None:
    """`delay_s` without a status delays the real answer by at least that long."""
    url = openstack.layout.public_url("compute") + "/flavors"
    openstack.faults.add("compute", path="/flavors", delay_s=1.0)
    began = time.monotonic()
    answer = ccm.get(url)
    assert time.monotonic() - began >= 1.0
    assert answer.status_code == 200


def test_apply_after_is_done_but_answered_with_the_fault(
    openstack: OpenStackWorld, ccm: httpx.Client
) -> None:
    """`apply_after` forwards the request, the service does it, and the caller still sees
    the fault (an outcome the caller cannot know)."""
    name = unique("test-apply-after")
    url = openstack.layout.public_url("network") + "/v2.0/networks"
    openstack.faults.add(
        "network", method="POST", path="/v2.0/networks", status=500, apply_after=True
    )
    answer = ccm.post(url, json={"network": {"name": name}})
    assert answer.status_code == 500
    made = list(openstack.sdk().network.networks(name=name))
    assert len(made) == 1
    openstack.sdk().network.delete_network(made[0])


def test_seen_counts_calls_by_service_and_action(
    openstack: OpenStackWorld, ccm: httpx.Client
) -> None:
    """The request log counts what went through the proxy, by service, method and path;
    the world's own sdk() calls are not in it."""
    openstack.faults.clear()
    compute = openstack.layout.public_url("compute")
    for _ in range(3):
        ccm.get(compute + "/servers/detail", params={"name": "^nothing$"})
    ccm.get(openstack.layout.public_url("network") + "/v2.0/ports", params={"device_id": "x"})
    list(openstack.sdk().compute.servers())
    assert (
        openstack.faults.seen("compute", "GET", r"^/v2\.1/servers/detail")
        == [("GET", "/v2.1/servers/detail?name=^nothing$")] * 3
    )
    assert openstack.faults.seen("network") == [("GET", "/v2.0/ports?device_id=x")]


@pytest.mark.parametrize(
    ("service", "method", "path", "body"),
    [
        pytest.param(
            "network",
            "POST",
            "/v2.0/networks",
            {"network": {"name": "x", "router:external": True}},
            id="external-network",
        ),
        pytest.param(
            "compute",
            "POST",
            "/flavors",
            {"flavor": {"name": "x", "ram": 1, "vcpus": 1, "disk": 1}},
            id="flavor",
        ),
        pytest.param(
            "compute", "POST", "/os-aggregates", {"aggregate": {"name": "x"}}, id="aggregate"
        ),
        pytest.param("identity", "GET", "/users", None, id="list-users"),
        pytest.param("compute", "GET", "/os-hypervisors", None, id="hypervisors"),
    ],
)
def test_ccm_user_is_refused_admin_calls(
    openstack: OpenStackWorld, ccm: httpx.Client, service, method, path, body
) -> None:
    """The ccm user (member, load-balancer_member) is refused what only an admin may do."""
    answer = ccm.request(method, openstack.layout.public_url(service) + path, json=body)
    assert answer.status_code == 403, answer.text


def test_ccm_user_does_what_a_ccm_needs(openstack: OpenStackWorld, ccm: httpx.Client) -> None:
    """As the ccm user: boot and find a server with its port and address, float an IP to
    it, route through the router, create a load balancer on the subnet; then clean up."""
    name = unique("test-ccm-needs")
    sdk = openstack.sdk()
    server = openstack.boot_server(name)
    lb_url = openstack.layout.public_url("load-balancer") + "/v2/lbaas/loadbalancers"
    try:
        found = ccm.get(
            openstack.layout.public_url("compute") + "/servers/detail", params={"name": f"^{name}$"}
        ).json()["servers"]
        assert [s["id"] for s in found] == [server["id"]]
        assert found[0]["OS-EXT-AZ:availability_zone"] == openstack.availability_zone
        network = openstack.layout.public_url("network")
        ports = ccm.get(network + "/v2.0/ports", params={"device_id": server["id"]}).json()["ports"]
        assert len(ports) == 1
        address = ports[0]["fixed_ips"][0]["ip_address"]
        floating = ccm.post(
            network + "/v2.0/floatingips",
            json={
                "floatingip": {
                    "floating_network_id": openstack.external_network_id,
                    "port_id": ports[0]["id"],
                }
            },
        )
        assert floating.status_code == 201, floating.text
        route = {"destination": "10.244.7.0/24", "nexthop": address}
        added = ccm.put(
            network + f"/v2.0/routers/{openstack.router_id}/add_extraroutes",
            json={"router": {"routes": [route]}},
        )
        assert added.status_code == 200, added.text
        removed = ccm.put(
            network + f"/v2.0/routers/{openstack.router_id}/remove_extraroutes",
            json={"router": {"routes": [route]}},
        )
        assert removed.status_code == 200, removed.text
        made = ccm.post(
            lb_url, json={"loadbalancer": {"name": name, "vip_subnet_id": openstack.subnet_id}}
        )
        assert made.status_code == 201, made.text
        lb = made.json()["loadbalancer"]
        deadline = time.monotonic() + 120
        while (
            status := ccm.get(f"{lb_url}/{lb['id']}").json()["loadbalancer"]["provisioning_status"]
        ) != "ACTIVE":
            assert status != "ERROR", status
            assert time.monotonic() < deadline, status
            time.sleep(0.5)
        vip = sdk.network.get_port(lb["vip_port_id"])
        assert vip.fixed_ips[0]["subnet_id"] == openstack.subnet_id
        ccm.delete(network + f"/v2.0/floatingips/{floating.json()['floatingip']['id']}")
        ccm.delete(f"{lb_url}/{lb['id']}", params={"cascade": "true"})
    finally:
        openstack.delete_server(server["id"])


def test_stop_and_delete_server_helpers(openstack: OpenStackWorld) -> None:
    """boot_server waits for ACTIVE, stop_server for SHUTOFF, delete_server until gone."""
    server = openstack.boot_server(unique("test-helpers"))
    compute = openstack.sdk().compute
    assert server["status"] == "ACTIVE"
    openstack.stop_server(server["id"])
    assert compute.get_server(server["id"]).status == "SHUTOFF"
    openstack.delete_server(server["id"])
    assert compute.find_server(server["id"], ignore_missing=True) is None


def test_write_cloud_conf_merges_extra_sections(openstack: OpenStackWorld, tmp_path: Path) -> None:
    """write_cloud_conf writes [Global] for the ccm user and merges extra sections/keys."""
    path = openstack.write_cloud_conf(
        tmp_path / "cloud.conf",
        extra={"Route": {"router-id": openstack.router_id}, "Global": {"region": "Other"}},
    )
    text = path.read_text()
    assert f"auth-url = {openstack.auth_url}" in text
    assert "username = ccm" in text
    assert "tenant-name = k8s" in text
    assert "region = Other" in text
    assert f"[Route]\nrouter-id = {openstack.router_id}" in text


def test_stop_group_kills_what_ignores_sigterm(tmp_path: Path) -> None:
    """Stopping a process group sends SIGTERM, then SIGKILL to a member that ignores it,
    and leaves no member running (what the world's stop does to octavia-worker)."""
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "time.sleep(600)\n"
    )
    process = Process.start(
        "stubborn", [sys.executable, "-c", code], run=tmp_path, logs=tmp_path, environ={}
    )
    deadline = time.monotonic() + 30
    while len(group_members(process.pid)) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert process.stop(grace_s=0.5) is True
    assert group_members(process.pid) == []
    assert process.popen is not None
    assert process.popen.returncode == -signal.SIGKILL


def test_world_refuses_a_non_loopback_host(tmp_path: Path) -> None:
    """A world on an address that is not loopback is refused before anything starts."""
    with pytest.raises(ValueError, match="not a loopback address"):
        OpenStackWorld(tmp_path, host="203.0.113.5")
    assert not list(tmp_path.iterdir())
