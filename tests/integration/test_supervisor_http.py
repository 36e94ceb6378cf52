"""serve()'s :10258 endpoints over a real socket (plain HTTP on loopback, real time)."""

from __future__ import annotations

import httpx
import trio

from tests.helpers.processes import free_port
from tests.helpers.supervisor import NoCapabilities, Probe
from trio_ccm.settings import Settings
from trio_ccm.supervisor import Serving, serve
from trio_ccm.testing.harness import emulator_connection
from trio_ccm_testbed.apiserver import ApiServer


async def test_endpoints_answer_over_http() -> None:
    """/readyz, /healthz?verbose, /configz, /debug/actors and /metrics describe the running
    replica: its checks, its settings (master's password redacted), its actors."""
    server = ApiServer(seed=1)
    server.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}})
    probe = Probe()
    settings = Settings(
        secure_port=free_port(),
        bind_address="127.0.0.1",
        plain_http=True,
        master="https://admin:hunter2@apiserver.example:6443",
    )
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            serving: Serving = await nursery.start(
                lambda task_status: serve(
                    settings,
                    NoCapabilities(),
                    controllers=[probe.controller()],
                    connection=emulator_connection(),
                    transport=server.transport(),
                    identity="replica-a",
                    task_status=task_status,
                )
            )
            await serving.wait_leading()
            await probe.first_handled.wait()
            base = f"http://127.0.0.1:{serving.http_port}"
            async with httpx.AsyncClient(base_url=base) as http:
                ready = await http.get("/readyz", params={"verbose": "1"})
                healthz = await http.get("/healthz", params={"verbose": "1"})
                configz = (await http.get("/configz")).json()
                actors = (await http.get("/debug/actors")).json()
                metrics = (await http.get("/metrics")).text
            nursery.cancel_scope.cancel()
    assert ready.status_code == 200
    assert "[+]informer-sync ok" in ready.text
    assert "[+]controllers ok" in ready.text
    assert healthz.text.splitlines()[:2] == ["[+]leaderElection ok", "[+]probe ok"]
    assert configz["settings"]["master"] == "https://REDACTED@apiserver.example:6443"
    assert "hunter2" not in str(configz)
    assert actors["leading"] is True
    assert actors["controllers"]["probe"]["managers"]["probe"]["statistics"]["handled"] == 1
    assert 'running_managed_controllers{manager="cloud-controller-manager",name="probe"} 1.0' in (
        metrics
    )
    assert 'leader_election_master_status{name="cloud-controller-manager"} 1.0' in metrics
