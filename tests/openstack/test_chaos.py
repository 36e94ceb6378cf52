"""`bench/chaos.py --cloud openstack --quick` on the session's OpenStack world: real
`trio-ccm --cloud-provider=openstack` replicas killed, frozen and shut down while Services and
Nova servers churn; no write outside the Lease (the fault proxy dates each, and names the
replica by its token's user), and Octavia and Neutron converge with no leaked, duplicate or
missing load balancer or floating IP. And `find_openstack_problems` itself names each kind."""

from __future__ import annotations

import copy
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trio_ccm.testing import make_service
from trio_ccm_testbed.chaos import find_openstack_problems

ROOT = Path(__file__).resolve().parents[2]
LB = "kube_service_chaos_default_web"
MARK = "Floating IP for Kubernetes external service default/web from cluster chaos"


def test_the_quick_openstack_chaos_run_finds_no_violation(
    openstack: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick run on the session's world exits 0 after some kill points, with writes
    judged, every Lease holder mapped to a replica, and 0 violations."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    chaos = importlib.import_module("chaos")
    code = chaos.main(["--quick", "--cloud", "openstack"], openstack_world=openstack)
    output = capsys.readouterr().out
    figures = json.loads(output.strip().splitlines()[-1])
    assert code == 0, output[-4000:]
    assert figures["cloud"] == "openstack"
    assert figures["violations_total"] == 0, figures["violations"]
    assert figures["kill_points_total"] > 0
    run = figures["runs"][0]
    assert run["cloud_writes"] > 0
    assert run["lease_identities_unmapped"] == []
    sys.modules.pop("chaos", None)


def web() -> dict[str, Any]:
    svc = make_service(
        "web", ports=[{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]
    )
    svc["metadata"]["uid"] = "11111111-2222-3333-4444-555555555555"
    svc["metadata"]["finalizers"] = ["service.kubernetes.io/load-balancer-cleanup"]
    svc["status"] = {"loadBalancer": {"ingress": [{"ip": "172.24.4.10"}]}}
    return svc


def right() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    lbs = [
        {
            "id": "lb-1",
            "name": LB,
            "provisioning_status": "ACTIVE",
            "vip_port_id": "port-1",
            "listeners": [(80, "TCP")],
        }
    ]
    fips = [{"floating_ip_address": "172.24.4.10", "description": MARK, "port_id": "port-1"}]
    return lbs, fips


def _second_lb(lbs: list[dict[str, Any]], fips: list[dict[str, Any]]) -> None:
    lbs.append({**lbs[0], "id": "lb-2"})


def _stray_lb(lbs: list[dict[str, Any]], fips: list[dict[str, Any]]) -> None:
    lbs.append({**lbs[0], "id": "lb-3", "name": "kube_service_chaos_default_gone"})


def _stray_fip(lbs: list[dict[str, Any]], fips: list[dict[str, Any]]) -> None:
    fips.append({**fips[0], "description": MARK.replace("/web", "/gone"), "port_id": None})


def _second_fip(lbs: list[dict[str, Any]], fips: list[dict[str, Any]]) -> None:
    fips.append({**fips[0], "floating_ip_address": "172.24.4.11", "port_id": None})


def _detached_fip(lbs: list[dict[str, Any]], fips: list[dict[str, Any]]) -> None:
    fips[0]["port_id"] = None


def _no_lb(lbs: list[dict[str, Any]], fips: list[dict[str, Any]]) -> None:
    lbs.clear()


def _no_fip(lbs: list[dict[str, Any]], fips: list[dict[str, Any]]) -> None:
    fips.clear()


def _stale_listener(lbs: list[dict[str, Any]], fips: list[dict[str, Any]]) -> None:
    lbs[0]["listeners"].append((81, "TCP"))


def _other_cluster(lbs: list[dict[str, Any]], fips: list[dict[str, Any]]) -> None:
    lbs.append({**lbs[0], "id": "lb-9", "name": "kube_service_other_default_web"})
    fips.append({**fips[0], "description": MARK.replace("chaos", "other"), "port_id": None})


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(_second_lb, ["duplicate"], id="two-load-balancers-for-one-service"),
        pytest.param(_stray_lb, ["leaked"], id="a-load-balancer-no-service-wants"),
        pytest.param(_stray_fip, ["leaked"], id="a-floating-ip-no-service-wants"),
        pytest.param(_second_fip, ["duplicate"], id="two-floating-ips-for-one-service"),
        pytest.param(_detached_fip, ["leaked"], id="a-floating-ip-off-the-vip"),
        pytest.param(_no_lb, ["missing"], id="no-load-balancer"),
        pytest.param(_no_fip, ["missing"], id="no-floating-ip"),
        pytest.param(_stale_listener, ["ports"], id="a-listener-of-a-removed-port"),
        pytest.param(_other_cluster, [], id="another-clusters-are-not-ours"),
    ],
)
def test_each_leftover_or_gap_is_named(
    change: Callable[[list[dict[str, Any]], list[dict[str, Any]]], None], expected: list[str]
) -> None:
    """Each change to a right cluster is found as its kind (and a right one has none)."""
    lbs, fips = copy.deepcopy(right())
    assert find_openstack_problems([], [web()], lbs, fips, cluster="chaos") == []
    change(lbs, fips)
    problems = find_openstack_problems([], [web()], lbs, fips, cluster="chaos")
    assert sorted(p.kind for p in problems) == expected
