"""apps/v1 Deployments and DaemonSets: stored with upstream's defaults and basic validation
(no controller runs), served to kubectl; and RBAC object names as upstream validates them."""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.helpers.emulator import MERGE, STRATEGIC
from trio_ccm_testbed.apiserver import ApiServer, Listening, serve_apiserver

DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
DAEMONSETS = "/apis/apps/v1/namespaces/default/daemonsets"
LABELS = {"app": "web"}


def pod_template(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": dict(LABELS)},
        "spec": {"containers": [{"name": "web", "image": "example.com/web:1.0"}], **spec},
    }


def deployment(name: str = "web", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": dict(LABELS)}, "template": pod_template(), **spec},
    }


def daemonset(name: str = "agent", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": dict(LABELS)}, "template": pod_template(), **spec},
    }


async def create(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> httpx.Response:
    with trio.fail_after(5):
        return await client.post(path, json=body)


# -- create: defaults, status, generation ---------------------------------------------------
async def test_deployment_created_with_upstream_defaults(client: httpx.AsyncClient) -> None:
    """A new Deployment gets apps/v1's defaults, an empty status and generation 1."""
    body = deployment()
    body["spec"]["template"]["spec"]["containers"][0]["livenessProbe"] = {
        "httpGet": {"path": "/healthz", "port": 8080}
    }
    response = await create(client, DEPLOYMENTS, body)
    assert response.status_code == 201, response.text
    stored = response.json()
    assert stored["metadata"]["generation"] == 1
    assert stored["status"] == {}
    spec = stored["spec"]
    assert spec["replicas"] == 1
    assert spec["revisionHistoryLimit"] == 10
    assert spec["progressDeadlineSeconds"] == 600
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
    }
    pod = spec["template"]["spec"]
    assert (pod["restartPolicy"], pod["dnsPolicy"], pod["schedulerName"]) == (
        "Always",
        "ClusterFirst",
        "default-scheduler",
    )
    assert pod["terminationGracePeriodSeconds"] == 30
    assert "serviceAccountName" not in pod  # admission sets it on Pods, not on templates
    [container] = pod["containers"]
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["livenessProbe"] == {
        "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }


async def test_daemonset_created_with_upstream_defaults(client: httpx.AsyncClient) -> None:
    """A new DaemonSet rolls one Pod at a time by default; on the host network each
    container port is also a host port."""
    body = daemonset(template=pod_template(hostNetwork=True))
    container = body["spec"]["template"]["spec"]["containers"][0]
    container["image"] = "example.com/agent"  # untagged: pulled every time
    container["ports"] = [{"containerPort": 10258}]
    response = await create(client, DAEMONSETS, body)
    assert response.status_code == 201, response.text
    stored = response.json()
    assert stored["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    assert stored["status"] == {}
    [container] = stored["spec"]["template"]["spec"]["containers"]
    assert container["ports"] == [{"containerPort": 10258, "protocol": "TCP", "hostPort": 10258}]
    assert container["imagePullPolicy"] == "Always"


# -- validation ------------------------------------------------------------------------------
def _without_selector() -> dict[str, Any]:
    body = deployment()
    del body["spec"]["selector"]
    return body


def _with_mount(volume: str) -> dict[str, Any]:
    template = pod_template(volumes=[{"name": "config", "configMap": {"name": "c"}}])
    template["spec"]["containers"][0]["volumeMounts"] = [{"name": volume, "mountPath": "/c"}]
    return deployment(template=template)


def _with_labels(labels: dict[str, str]) -> dict[str, Any]:
    body = deployment()
    body["spec"]["template"]["metadata"]["labels"] = labels
    return body


MISMATCH = "`selector` does not match template `labels`"


@pytest.mark.parametrize(
    ("path", "body", "errors"),
    [
        pytest.param(
            DEPLOYMENTS,
            _without_selector(),
            # A nil selector selects nothing, so upstream also finds the labels unmatched.
            [
                ("spec.selector", "Required value"),
                (
                    "spec.template.metadata.labels",
                    f'Invalid value: map[string]string{{"app":"web"}}: {MISMATCH}',
                ),
            ],
            id="selector-required",
        ),
        pytest.param(
            DEPLOYMENTS,
            deployment(selector={}),
            [("spec.selector", "Invalid value: {}: empty selector is invalid for deployment")],
            id="selector-empty",
        ),
        pytest.param(
            DEPLOYMENTS,
            _with_labels({"app": "other"}),
            [
                (
                    "spec.template.metadata.labels",
                    f'Invalid value: map[string]string{{"app":"other"}}: {MISMATCH}',
                )
            ],
            id="labels-mismatch",
        ),
        pytest.param(
            DEPLOYMENTS,
            deployment(template=None),
            [
                ("spec.template.metadata.labels", f"Invalid value: {{}}: {MISMATCH}"),
                ("spec.template.spec.containers", "Required value"),
            ],
            id="template-missing",
        ),
        pytest.param(
            DEPLOYMENTS,
            deployment(template=pod_template(containers=[{"name": "web"}])),
            [("spec.template.spec.containers[0].image", "Required value")],
            id="image-required",
        ),
        pytest.param(
            DEPLOYMENTS,
            _with_mount("cfg"),
            [("spec.template.spec.containers[0].volumeMounts[0].name", 'Not found: "cfg"')],
            id="mount-of-unknown-volume",
        ),
        pytest.param(
            DEPLOYMENTS,
            deployment(template=pod_template(restartPolicy="Never")),
            [
                (
                    "spec.template.spec.restartPolicy",
                    'Unsupported value: "Never": supported values: "Always"',
                )
            ],
            id="restart-policy",
        ),
        pytest.param(
            DEPLOYMENTS,
            deployment(replicas=-1),
            [("spec.replicas", "Invalid value: -1: must be greater than or equal to 0")],
            id="replicas-negative",
        ),
        pytest.param(
            DEPLOYMENTS,
            deployment(strategy={"type": "Blue"}),
            [
                (
                    "spec.strategy.type",
                    'Unsupported value: "Blue": supported values: "Recreate", "RollingUpdate"',
                )
            ],
            id="deployment-strategy",
        ),
        pytest.param(
            DEPLOYMENTS,
            deployment(strategy={"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}),
            [
                (
                    "spec.strategy.rollingUpdate.maxUnavailable",
                    "Invalid value: 0: may not be 0 when `maxSurge` is 0",
                )
            ],
            id="rolling-update-stuck",
        ),
        pytest.param(
            DAEMONSETS,
            daemonset(selector={}),
            [("spec.selector", "Invalid value: {}: empty selector is invalid for daemonset")],
            id="daemonset-selector-empty",
        ),
        pytest.param(
            DAEMONSETS,
            daemonset(updateStrategy={"type": "Recreate"}),
            [
                (
                    "spec.updateStrategy.type",
                    'Unsupported value: "Recreate": supported values: "OnDelete", "RollingUpdate"',
                )
            ],
            id="daemonset-strategy",
        ),
    ],
)
async def test_invalid_workloads_are_refused(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], errors: list[tuple[str, str]]
) -> None:
    """A workload breaking a rule is 422 Invalid, each cause naming the field."""
    response = await create(client, path, body)
    assert response.status_code == 422, response.text
    causes = response.json()["details"]["causes"]
    assert [(c["field"], c["message"]) for c in causes] == errors


# -- update, status, patch -------------------------------------------------------------------
async def test_spec_change_bumps_generation_and_keeps_status(
    server: ApiServer, client: httpx.AsyncClient
) -> None:
    """A spec change bumps metadata.generation; the main endpoint keeps the stored status
    and /status keeps the stored spec."""
    await create(client, DEPLOYMENTS, deployment())
    with trio.fail_after(5):
        status = await client.patch(
            f"{DEPLOYMENTS}/web/status",
            content=json.dumps({"status": {"replicas": 1}, "spec": {"replicas": 5}}),
            headers=MERGE,
        )
        changed = await client.patch(
            f"{DEPLOYMENTS}/web",
            content=json.dumps({"spec": {"replicas": 3}, "status": {"replicas": 9}}),
            headers=MERGE,
        )
        relabelled = await client.patch(
            f"{DEPLOYMENTS}/web",
            content=json.dumps({"metadata": {"labels": {"tier": "front"}}}),
            headers=MERGE,
        )
    assert status.status_code == 200, status.text
    assert (status.json()["spec"]["replicas"], status.json()["status"]) == (1, {"replicas": 1})
    assert status.json()["metadata"]["generation"] == 1
    assert changed.status_code == 200, changed.text
    assert (changed.json()["spec"]["replicas"], changed.json()["status"]) == (3, {"replicas": 1})
    assert changed.json()["metadata"]["generation"] == 2
    assert relabelled.json()["metadata"]["generation"] == 2


async def test_selector_is_immutable(client: httpx.AsyncClient) -> None:
    """Changing a Deployment's selector is 422 "field is immutable", as in apps/v1."""
    await create(client, DEPLOYMENTS, deployment())
    patch = {
        "spec": {
            "selector": {"matchLabels": {"app": "web", "tier": "x"}},
            "template": {"metadata": {"labels": {"tier": "x"}}},
        }
    }
    with trio.fail_after(5):
        response = await client.patch(
            f"{DEPLOYMENTS}/web", content=json.dumps(patch), headers=MERGE
        )
    assert response.status_code == 422, response.text
    [cause] = response.json()["details"]["causes"]
    assert cause["field"] == "spec.selector"
    assert cause["message"].endswith("field is immutable")


async def test_strategic_patch_merges_containers_by_name(client: httpx.AsyncClient) -> None:
    """A strategic merge patch of one container (by name) keeps the others, and merges
    env entries by name, as upstream's pod template patch keys do."""
    template = pod_template()
    template["spec"]["containers"].append(
        {"name": "sidecar", "image": "example.com/sidecar:1", "env": [{"name": "A", "value": "1"}]}
    )
    await create(client, DEPLOYMENTS, deployment(template=template))
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "sidecar", "env": [{"name": "B", "value": "2"}]},
                        {"name": "web", "image": "example.com/web:2.0"},
                    ]
                }
            }
        }
    }
    with trio.fail_after(5):
        response = await client.patch(
            f"{DEPLOYMENTS}/web", content=json.dumps(patch), headers=STRATEGIC
        )
    assert response.status_code == 200, response.text
    containers = {c["name"]: c for c in response.json()["spec"]["template"]["spec"]["containers"]}
    assert containers["web"]["image"] == "example.com/web:2.0"
    assert containers["sidecar"]["image"] == "example.com/sidecar:1"
    assert containers["sidecar"]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "2"},
    ]


# -- discovery -------------------------------------------------------------------------------
async def test_apps_group_in_discovery(client: httpx.AsyncClient) -> None:
    """/apis/apps/v1 lists deployments and daemonsets with their short names and status."""
    with trio.fail_after(5):
        response = await client.get("/apis/apps/v1")
        groups = await client.get("/apis")
    assert response.status_code == 200
    resources = {r["name"]: r for r in response.json()["resources"]}
    assert resources["deployments"]["kind"] == "Deployment"
    assert resources["deployments"]["shortNames"] == ["deploy"]
    assert resources["daemonsets"]["shortNames"] == ["ds"]
    assert resources["deployments"]["namespaced"] is True
    assert resources["deployments/status"]["verbs"] == ["get", "patch", "update"]
    assert "daemonsets/status" in resources
    assert "apps" in {g["name"] for g in groups.json()["groups"]}


# -- RBAC names ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "kind", "namespaced"),
    [
        pytest.param("/apis/rbac.authorization.k8s.io/v1/clusterroles", "ClusterRole", False),
        pytest.param(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", "ClusterRoleBinding", False
        ),
        pytest.param("/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", "Role", True),
        pytest.param(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
            "RoleBinding",
            True,
        ),
    ],
)
async def test_rbac_names_are_path_segments(
    client: httpx.AsyncClient, path: str, kind: str, namespaced: bool
) -> None:
    """RBAC objects may be named `system:...` (upstream's ValidateRBACName); `/` is refused."""
    body: dict[str, Any] = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind}
    if kind.endswith("Binding"):
        body["roleRef"] = {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "view",
        }
    good = copy.deepcopy(body) | {"metadata": {"name": "system:cloud-controller-manager"}}
    bad = copy.deepcopy(body) | {"metadata": {"name": "a/b"}}
    created = await create(client, path, good)
    refused = await create(client, path, bad)
    assert created.status_code == 201, created.text
    assert created.json()["metadata"]["name"] == "system:cloud-controller-manager"
    assert refused.status_code == 422, refused.text
    [cause] = refused.json()["details"]["causes"]
    assert (cause["field"], cause["message"]) == (
        "metadata.name",
        "Invalid value: \"a/b\": may not contain '/'",
    )


# -- kubectl ---------------------------------------------------------------------------------
def _kubectl() -> str | None:
    return shutil.which("kubectl")


async def _serve(nursery: trio.Nursery, tmp_path: Path) -> tuple[ApiServer, Path]:
    server = ApiServer(seed=1)
    listening: Listening = await nursery.start(functools.partial(serve_apiserver, server))
    return server, listening.write_kubeconfig(tmp_path / "kubeconfig")


async def _run(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    binary = _kubectl()
    assert binary is not None
    command = [
        binary,
        f"--kubeconfig={kubeconfig}",
        f"--cache-dir={kubeconfig.parent / 'cache'}",
        "--request-timeout=20s",
        *args,
    ]
    done = await trio.run_process(
        command, capture_stdout=True, capture_stderr=True, check=False, env=dict(os.environ)
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def _write(path: Path, *documents: dict[str, Any]) -> Path:
    path.write_text("\n---\n".join(json.dumps(doc) for doc in documents))
    return path


@pytest.mark.kubectl
@pytest.mark.skipif(_kubectl() is None, reason="kubectl is not on PATH")
async def test_kubectl_creates_gets_and_applies_workloads(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """kubectl creates a Deployment and a DaemonSet, gets them back, and a second apply
    with a new image configures the Deployment (generation 2)."""
    server, kubeconfig = await _serve(nursery, tmp_path)
    manifest = _write(tmp_path / "workloads.yaml", deployment(), daemonset())
    with trio.fail_after(60):
        code, out, err = await _run(kubeconfig, "create", "-f", str(manifest))
        assert code == 0, err
        assert out.split("\n")[:2] == [
            "deployment.apps/web created",
            "daemonset.apps/agent created",
        ]
        code, out, err = await _run(kubeconfig, "get", "deploy,ds", "-o", "json")
        assert code == 0, err
        kinds = [(item["kind"], item["metadata"]["name"]) for item in json.loads(out)["items"]]
        assert kinds == [("Deployment", "web"), ("DaemonSet", "agent")]

        code, out, err = await _run(kubeconfig, "delete", "deployment", "web")
        assert (code, out.strip()) == (0, 'deployment.apps "web" deleted'), err
        code, out, err = await _run(kubeconfig, "apply", "-f", str(manifest))
        assert code == 0, err
        assert out.split("\n")[:1] == ["deployment.apps/web created"]
        changed = deployment()
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = "example.com/web:2.0"
        code, out, err = await _run(kubeconfig, "apply", "-f", str(_write(manifest, changed)))
        assert code == 0, err
        assert out.strip() == "deployment.apps/web configured"
    stored = server.get("apps/v1", "Deployment", "web", namespace="default")
    assert stored["metadata"]["generation"] == 2
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == "example.com/web:2.0"


@pytest.mark.kubectl
@pytest.mark.skipif(_kubectl() is None, reason="kubectl is not on PATH")
async def test_kubectl_shows_why_a_workload_is_refused(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """kubectl apply of a Deployment whose selector misses its labels exits 1 with the
    server's message."""
    _, kubeconfig = await _serve(nursery, tmp_path)
    manifest = _write(tmp_path / "bad.yaml", _with_labels({"app": "other"}))
    with trio.fail_after(60):
        code, _, err = await _run(kubeconfig, "apply", "-f", str(manifest))
    assert code == 1
    assert 'The Deployment "web" is invalid: spec.template.metadata.labels' in err
    assert MISMATCH in err
