"""kubectl 1.27 ... 1.33 against the emulator over TLS: output, exit codes and server state.

Each scenario runs once per installed kubectl version, the versions side by side, each on
its own emulator with its own kubeconfig and discovery cache.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from tests.helpers.peers import (
    KUBECTL_VERSIONS,
    NODE_PORTS,
    REQUEST_TIMEOUT,
    Emulator,
    Kubectl,
    KubectlScenario,
    Run,
    kubectl_binary,
    lb_service,
    missing_kubectl_reason,
    node,
    ready_condition,
    run_on_every_kubectl,
)

pytestmark = pytest.mark.kubectl

AGE = re.compile(r"\d+s")


# -- helpers --------------------------------------------------------------------------
def write_manifest(workdir: Path, name: str, obj: dict[str, Any]) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / name
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return path


def table(stdout: str) -> list[list[str]]:
    """`kubectl get` output split into whitespace-separated cells, header first."""
    return [line.split() for line in stdout.splitlines() if line.strip()]


def service(em: Emulator, name: str = "web", namespace: str = "default") -> dict[str, Any]:
    return em.server.get("v1", "Service", name, namespace=namespace)


def node_state(em: Emulator, name: str = "node-1") -> dict[str, Any]:
    return em.server.get("v1", "Node", name)


# -- scenarios -------------------------------------------------------------------------
async def get_nodes(k: Kubectl, em: Emulator, workdir: Path) -> None:
    """`get nodes` prints upstream's node columns: status, roles (both label forms), version."""
    em.server.create(node("cp-1", ready=True, labels={"node-role.kubernetes.io/control-plane": ""}))
    em.server.create(node("fresh-1"))
    em.server.create(
        node("worker-1", ready=False, unschedulable=True, labels={"kubernetes.io/role": "worker"})
    )
    run = await k.ok("get", "nodes")
    header, *rows = table(run.stdout)
    assert header == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"], run
    assert all(AGE.fullmatch(row[3]) for row in rows), run
    assert [row[:3] + row[4:] for row in rows] == [
        ["cp-1", "Ready", "control-plane", "v1.33.1"],
        ["fresh-1", "Unknown", "<none>", "v1.33.1"],
        ["worker-1", "NotReady,SchedulingDisabled", "worker", "v1.33.1"],
    ], run


async def get_services_all_namespaces(k: Kubectl, em: Emulator, workdir: Path) -> None:
    """`get svc -A` lists the `kubernetes` Service in default and LoadBalancers as printed."""
    em.server.create(lb_service("edge", port=443, namespace="kube-system"))
    em.server.create(lb_service("ready", namespace="default"))
    hostname = "lb-0123456789.elb.example.com"
    await em.patch(
        "/api/v1/namespaces/default/services/ready/status",
        {"status": {"loadBalancer": {"ingress": [{"hostname": hostname}]}}},
        "application/merge-patch+json",
    )
    run = await k.ok("get", "svc", "-A")
    header, *rows = table(run.stdout)
    assert header == [
        "NAMESPACE",
        "NAME",
        "TYPE",
        "CLUSTER-IP",
        "EXTERNAL-IP",
        "PORT(S)",
        "AGE",
    ], run
    assert all(AGE.fullmatch(row[-1]) for row in rows), run
    ready = service(em, "ready")["spec"]
    edge = service(em, "edge", "kube-system")["spec"]
    assert [row[:-1] for row in rows] == [
        ["default", "kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP"],
        [
            "default",
            "ready",
            "LoadBalancer",
            ready["clusterIP"],
            hostname,
            f"80:{ready['ports'][0]['nodePort']}/TCP",
        ],
        [
            "kube-system",
            "edge",
            "LoadBalancer",
            edge["clusterIP"],
            "<pending>",
            f"443:{edge['ports'][0]['nodePort']}/TCP",
        ],
    ], run


async def apply_creates(k: Kubectl, em: Emulator, workdir: Path) -> None:
    """`apply` of a new LoadBalancer Service creates it with a cluster IP and a node port."""
    manifest = lb_service()
    run = await k.apply(write_manifest(workdir, "web.yaml", manifest))
    assert run.stdout.strip() == "service/web created", run
    stored = service(em)
    spec = stored["spec"]
    assert spec["type"] == "LoadBalancer"
    assert spec["clusterIP"].startswith("10.")
    assert spec["clusterIPs"] == [spec["clusterIP"]]
    assert spec["ports"][0]["nodePort"] in NODE_PORTS
    applied = json.loads(
        stored["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
    )
    assert applied["metadata"]["name"] == "web"
    assert applied["spec"] == manifest["spec"]


async def apply_configures(k: Kubectl, em: Emulator, workdir: Path) -> None:
    """A second `apply` with a changed port patches the Service and keeps its node port."""
    await k.apply(write_manifest(workdir, "web.yaml", lb_service(port=80)))
    before = service(em)["spec"]
    run = await k.apply(write_manifest(workdir, "web.yaml", lb_service(port=8081)))
    assert run.stdout.strip() == "service/web configured", run
    stored = service(em)
    spec = stored["spec"]
    assert spec["clusterIP"] == before["clusterIP"]
    # Upstream keeps an allocated nodePort for a port of the same name on update.
    assert spec["ports"] == [
        {
            "name": "http",
            "nodePort": before["ports"][0]["nodePort"],
            "port": 8081,
            "protocol": "TCP",
            "targetPort": 8080,
        }
    ]
    applied = json.loads(
        stored["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
    )
    assert applied["spec"]["ports"][0]["port"] == 8081


async def patch_merge(k: Kubectl, em: Emulator, workdir: Path) -> None:
    """`patch --type merge` sets and nulls out labels and replaces the whole ports list."""
    old_port = em.server.create(lb_service(namespace="default"))["spec"]["ports"][0]["nodePort"]
    patch = {
        "metadata": {"labels": {"tier": "front", "app": None}},
        "spec": {"ports": [{"name": "admin", "port": 9000}]},
    }
    run = await k.ok("patch", "svc", "web", "--type", "merge", "-p", json.dumps(patch))
    assert run.stdout.strip() == "service/web patched", run
    stored = service(em)
    assert stored["metadata"]["labels"] == {"tier": "front"}
    (port,) = stored["spec"]["ports"]
    assert {k: v for k, v in port.items() if k != "nodePort"} == {
        "name": "admin",
        "port": 9000,
        "protocol": "TCP",
        "targetPort": 9000,
    }
    assert port["nodePort"] in NODE_PORTS
    assert port["nodePort"] != old_port


async def patch_json(k: Kubectl, em: Emulator, workdir: Path) -> None:
    """`patch --type json` applies test, replace and add operations in order."""
    old = em.server.create(lb_service(namespace="default"))["spec"]["ports"][0]
    ops = [
        {"op": "test", "path": "/spec/ports/0/port", "value": 80},
        {"op": "replace", "path": "/spec/ports/0/port", "value": 9090},
        {"op": "add", "path": "/metadata/labels/tier", "value": "back"},
    ]
    run = await k.ok("patch", "svc", "web", "--type", "json", "-p", json.dumps(ops))
    assert run.stdout.strip() == "service/web patched", run
    stored = service(em)
    assert stored["metadata"]["labels"] == {"app": "web", "tier": "back"}
    assert stored["spec"]["ports"] == [{**old, "port": 9090}]


async def patch_json_failed_test(k: Kubectl, em: Emulator, workdir: Path) -> None:
    """A JSON patch whose `test` op fails exits non-zero with the 422 message; nothing changes."""
    created = em.server.create(lb_service(namespace="default"))
    ops = [
        {"op": "test", "path": "/spec/ports/0/port", "value": 81},
        {"op": "replace", "path": "/spec/ports/0/port", "value": 9090},
    ]
    run = await k.run("patch", "svc", "web", "--type", "json", "-p", json.dumps(ops))
    assert run.returncode == 1, run
    stored = service(em)
    assert stored["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert stored["spec"]["ports"][0]["port"] == 80
    # kube-apiserver answers NewGenericServerResponse(422, ...): reason Invalid, a generic
    # message, and the json-patch text as a field-less UnexpectedServerResponse cause, which
    # kubectl prints as "<field>: <message>".
    assert run.stderr.strip() == (
        "The request is invalid: : testing value /spec/ports/0/port failed: test failed"
    ), run


async def patch_strategic(k: Kubectl, em: Emulator, workdir: Path) -> None:
    """`patch --type strategic` merges ports by their `port` key and appends new ones."""
    old = em.server.create(lb_service(namespace="default"))["spec"]["ports"][0]
    patch = {
        "spec": {
            "ports": [
                {"port": 80, "targetPort": 9999},
                {"name": "https", "port": 443, "targetPort": 8443},
            ]
        }
    }
    run = await k.ok("patch", "svc", "web", "--type", "strategic", "-p", json.dumps(patch))
    assert run.stdout.strip() == "service/web patched", run
    first, second = service(em)["spec"]["ports"]
    assert first == {**old, "targetPort": 9999}
    assert {k: v for k, v in second.items() if k != "nodePort"} == {
        "name": "https",
        "port": 443,
        "protocol": "TCP",
        "targetPort": 8443,
    }
    assert second["nodePort"] in NODE_PORTS
    assert second["nodePort"] != old["nodePort"]


async def label_and_unlabel(k: Kubectl, em: Emulator, workdir: Path) -> None:
    """`label` adds a node label and `label key-` removes it, leaving the others alone."""
    em.server.create(node("node-1", ready=True))
    run = await k.ok("label", "node", "node-1", "zone=a")
    assert run.stdout.strip() == "node/node-1 labeled", run
    labels = node_state(em)["metadata"]["labels"]
    assert labels == {"kubernetes.io/hostname": "node-1", "zone": "a"}
    run = await k.ok("label", "node", "node-1", "zone-")
    assert run.stdout.strip() == "node/node-1 unlabeled", run
    assert node_state(em)["metadata"]["labels"] == {"kubernetes.io/hostname": "node-1"}


async def annotate(k: Kubectl, em: Emulator, workdir: Path) -> None:
    """`annotate` sets a node annotation."""
    em.server.create(node("node-1", ready=True))
    run = await k.ok("annotate", "node", "node-1", "example.com/note=hello")
    # kubectl 1.27 itself prints the verb unconjugated (its message, not the server's).
    verb = "annotate" if k.version == "1.27" else "annotated"
    assert run.stdout.strip() == f"node/node-1 {verb}", run
    assert node_state(em)["metadata"]["annotations"] == {"example.com/note": "hello"}


async def taint_and_untaint(k: Kubectl, em: Emulator, workdir: Path) -> None:
    """`taint` adds a NoSchedule taint to the node spec and `taint ...-` removes it."""
    em.server.create(node("node-1", ready=True))
    run = await k.ok("taint", "node", "node-1", "dedicated=gpu:NoSchedule")
    assert run.stdout.strip() == "node/node-1 tainted", run
    assert node_state(em)["spec"]["taints"] == [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    ]
    run = await k.ok("taint", "node", "node-1", "dedicated=gpu:NoSchedule-")
    assert run.stdout.strip() == "node/node-1 untainted", run
    assert not node_state(em)["spec"].get("taints")


async def wait_for_ready(k: Kubectl, em: Emulator, workdir: Path) -> None:
    """`wait --for=condition=Ready` returns once the status subresource reports Ready."""
    em.server.create(node("node-1"))
    watching = em.server.store.watch_started
    finished: list[Run] = []
    async with trio.open_nursery() as nursery:

        async def wait() -> None:
            finished.append(
                await k.run("wait", "--for=condition=Ready", "node/node-1", "--timeout=50s")
            )
            # If kubectl gave up before watching, stop waiting for its watch.
            nursery.cancel_scope.cancel()

        nursery.start_soon(wait)
        await watching.wait()
        await em.patch(
            "/api/v1/nodes/node-1/status",
            {"status": {"conditions": [ready_condition(True)]}},
        )
    (run,) = finished
    assert run.returncode == 0, run
    assert run.stdout.strip() == "node/node-1 condition met", run
    assert node_state(em)["status"]["conditions"][0]["status"] == "True"


async def delete_service(k: Kubectl, em: Emulator, workdir: Path) -> None:
    """`delete svc` removes the Service from the server."""
    em.server.create(lb_service(namespace="default"))
    run = await k.ok("delete", "svc", "web")
    assert run.stdout.strip() == 'service "web" deleted', run
    assert em.lookup("v1", "Service", "web", "default") is None


async def get_missing(k: Kubectl, em: Emulator, workdir: Path) -> None:
    """`get` of a missing Service exits 1 with the server's NotFound message."""
    run = await k.run("get", "svc", "nope")
    assert run.returncode == 1, run
    assert run.stderr.strip() == 'Error from server (NotFound): services "nope" not found', run


async def create_invalid(k: Kubectl, em: Emulator, workdir: Path) -> None:
    """`create` of a Service with port 70000 exits 1 with the 422 field errors."""
    bad = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "bad"},
        "spec": {"ports": [{"port": 70000}]},
    }
    path = write_manifest(workdir, "bad.yaml", bad)
    run = await k.run("create", *k.validate_flags, "-f", str(path))
    assert run.returncode == 1, run
    lines = [line.strip() for line in run.stderr.splitlines()]
    assert lines[0] == 'The Service "bad" is invalid:', run
    assert (
        "* spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive"
        in lines
    ), run
    assert em.lookup("v1", "Service", "bad", "default") is None


SCENARIOS = [
    pytest.param(get_nodes, id="get-nodes"),
    pytest.param(get_services_all_namespaces, id="get-svc-all-namespaces"),
    pytest.param(apply_creates, id="apply-create"),
    pytest.param(apply_configures, id="apply-configure"),
    pytest.param(patch_merge, id="patch-merge"),
    pytest.param(patch_json, id="patch-json"),
    pytest.param(patch_json_failed_test, id="patch-json-failed-test"),
    pytest.param(patch_strategic, id="patch-strategic"),
    pytest.param(label_and_unlabel, id="label"),
    pytest.param(annotate, id="annotate"),
    pytest.param(taint_and_untaint, id="taint"),
    pytest.param(wait_for_ready, id="wait-ready"),
    pytest.param(delete_service, id="delete"),
    pytest.param(get_missing, id="get-missing"),
    pytest.param(create_invalid, id="create-invalid"),
]


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_kubectl_scenario(scenario: KubectlScenario, tmp_path: Path) -> None:
    """Every installed kubectl version runs the scenario against its own TLS emulator."""
    with trio.fail_after(60):
        await run_on_every_kubectl(tmp_path, scenario)


@pytest.mark.parametrize(
    "version",
    [
        pytest.param(
            v,
            id=f"kubectl-{v}",
            marks=pytest.mark.skipif(kubectl_binary(v) is None, reason=missing_kubectl_reason(v)),
        )
        for v in KUBECTL_VERSIONS
    ],
)
async def test_kubectl_version_talks_to_emulator(
    version: str, emulator: Emulator, tmp_path: Path
) -> None:
    """Each kubectl binary is the version it claims and reads the emulator's /version."""
    binary = kubectl_binary(version)
    assert binary is not None
    kubectl = Kubectl(version, binary, emulator.kubeconfig, tmp_path / "cache")
    with trio.fail_after(60):
        run = await kubectl.ok("version", "-o", "json")
    reported = json.loads(run.stdout)
    assert reported["clientVersion"]["minor"] == version.split(".")[1]
    assert reported["serverVersion"]["major"] == "1"
    assert reported["serverVersion"]["minor"] == "33"


@pytest.mark.skipif(kubectl_binary("1.33") is None, reason=missing_kubectl_reason("1.33"))
async def test_standalone_apiserver_serves_kubectl(tmp_path: Path) -> None:
    """`trio-ccm apiserver --tls` writes a kubeconfig kubectl can use and exits 0 on SIGINT."""
    command = Path(sys.executable).parent / "trio-ccm"
    kubeconfig = tmp_path / "kubeconfig"
    stderr_path = tmp_path / "stderr.txt"
    with trio.fail_after(60), stderr_path.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [
                str(command),
                "apiserver",
                "--tls",
                "--port",
                "0",
                "--kubeconfig-out",
                str(kubeconfig),
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        try:
            assert process.stdout is not None
            output = b""
            while not re.search(rb"kubeconfig written to [^\n]*\n", output):
                chunk = await process.stdout.receive_some()
                assert chunk, f"trio-ccm exited early: {output!r} {stderr_path.read_text()}"
                output += chunk
            lines = output.decode().splitlines()
            assert re.fullmatch(
                r"trio-ccm apiserver listening on https://127\.0\.0\.1:\d+", lines[0]
            ), lines
            assert lines[1] == f"kubeconfig written to {kubeconfig}", lines

            binary = kubectl_binary("1.33")
            assert binary is not None
            done = await trio.run_process(
                [
                    str(binary),
                    f"--kubeconfig={kubeconfig}",
                    f"--cache-dir={tmp_path / 'cache'}",
                    REQUEST_TIMEOUT,
                    "get",
                    "ns",
                ],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
            assert done.returncode == 0, done.stderr.decode()
            header, *rows = table(done.stdout.decode())
            assert header == ["NAME", "STATUS", "AGE"]
            names = {row[0]: row[1] for row in rows}
            for namespace in ("default", "kube-system", "kube-public"):
                assert names.get(namespace) == "Active", done.stdout.decode()

            process.send_signal(signal.SIGINT)
            returncode = await process.wait()
            rest = b""
            while chunk := await process.stdout.receive_some():
                rest += chunk
            assert returncode == 0, stderr_path.read_text()
            assert "received SIGINT, stopping" in rest.decode()
        finally:
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()
