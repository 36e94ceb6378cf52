"""The kubectl matrix: every command a CCM user types, on every installed kubectl version.

One emulator per version, the versions side by side; each version runs the whole table of
commands in order against its emulator (a step may rely on what the steps before it made).
Every step states its expected exit code and what the output must show, and may check the
server's state. All failures of a version are reported together, named by command group.

Not in the table, because the emulator runs no workloads (docs/emulator.md): `top` (no
metrics API), `rollout status`/`rollout history` (no Deployment controller, no
ReplicaSets), `logs`/`exec`/`port-forward`/`drain` (no kubelets, no evictions).
"""

from __future__ import annotations

import base64
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from tests.helpers.peers import (
    KUBECTL_VERSIONS,
    Emulator,
    Kubectl,
    Run,
    kubectl_binary,
    missing_kubectl_reason,
    start_emulator,
)

pytestmark = pytest.mark.kubectl

Check = Callable[[Emulator, Run], None]


@dataclass(frozen=True)
class Step:
    group: str
    args: tuple[str, ...]
    rc: int = 0
    shows: str = ""  # a regular expression the output (stdout + stderr) must match
    check: Check | None = None
    env: dict[str, str] = field(default_factory=dict)


def step(
    group: str,
    *args: str,
    rc: int = 0,
    shows: str = "",
    check: Check | None = None,
    env: dict[str, str] | None = None,
) -> Step:
    return Step(group, args, rc, shows, check, env or {})


def stored(em: Emulator, api_version: str, kind: str, name: str, ns: str = "") -> dict[str, Any]:
    found = em.lookup(api_version, kind, name, ns)
    assert found is not None, f"{kind} {ns}/{name} is missing"
    return found


def gone(api_version: str, kind: str, name: str, ns: str = "default") -> Check:
    def check(em: Emulator, run: Run) -> None:
        assert em.lookup(api_version, kind, name, ns) is None, f"{kind} {name} still exists"

    return check


def replicas(expected: int) -> Check:
    def check(em: Emulator, run: Run) -> None:
        deployment = stored(em, "apps/v1", "Deployment", "web", "default")
        assert deployment["spec"]["replicas"] == expected, deployment["spec"]

    return check


def jwt(em: Emulator, run: Run) -> None:
    header, payload, signature = run.stdout.strip().split(".")
    assert json.loads(_unb64(header))["alg"] == "ES256"
    assert signature
    claims = json.loads(_unb64(payload))
    assert claims["sub"] == "system:serviceaccount:default:robot"
    assert claims["iss"] == "https://kubernetes.default.svc.cluster.local"


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def ssa_owned(em: Emulator, run: Run) -> None:
    service = stored(em, "v1", "Service", "applied", "default")
    managers = {(e["manager"], e["operation"]) for e in service["metadata"]["managedFields"]}
    assert ("kubectl", "Apply") in managers, managers


def label_is(value: str) -> Check:
    def check(em: Emulator, run: Run) -> None:
        service = stored(em, "v1", "Service", "applied", "default")
        assert service["metadata"]["labels"]["tier"] == value

    return check


def foreground_done(em: Emulator, run: Run) -> None:
    assert em.lookup("apps/v1", "Deployment", "owner", "default") is None
    assert em.lookup("v1", "ConfigMap", "owned", "default") is None


def orphaned(em: Emulator, run: Run) -> None:
    assert em.lookup("apps/v1", "Deployment", "owner2", "default") is None
    orphan = stored(em, "v1", "ConfigMap", "owned2", "default")
    assert "ownerReferences" not in orphan["metadata"]


def protobuf_created(kind: str, name: str, ns: str = "default", api: str = "v1") -> Check:
    def check(em: Emulator, run: Run) -> None:
        stored(em, api, kind, name, ns)

    return check


def manifests(workdir: Path) -> dict[str, Path]:
    """The manifests the steps use, written once per version."""
    workdir.mkdir(parents=True, exist_ok=True)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "applied", "labels": {"tier": "front"}},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": "applied"},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
        },
    }
    changed = json.loads(json.dumps(service))
    changed["metadata"]["labels"]["tier"] = "back"
    unknown = json.loads(json.dumps(service))
    unknown["metadata"]["name"] = "typo"
    unknown["spec"]["typ"] = "NodePort"
    owner = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "owner"},
        "spec": {
            "selector": {"matchLabels": {"app": "owner"}},
            "template": {
                "metadata": {"labels": {"app": "owner"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    }
    files = {
        "service": service,
        "service-changed": changed,
        "unknown-field": unknown,
        "owner": owner,
        "owner2": {**owner, "metadata": {"name": "owner2"}},
    }
    paths = {}
    for name, body in files.items():
        path = workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(body, sort_keys=False))
        paths[name] = path
    return paths


def owned_configmap(em: Emulator, name: str, owner: str) -> None:
    """A ConfigMap owned by Deployment `owner` (set up from Python: kubectl cannot)."""
    deployment = stored(em, "apps/v1", "Deployment", owner, "default")
    em.server.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": "default",
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": owner,
                        "uid": deployment["metadata"]["uid"],
                        "blockOwnerDeletion": True,
                    }
                ],
            },
        }
    )


def an_event(em: Emulator) -> None:
    """An Event as the CCM records one (kubectl cannot create Events)."""
    em.server.create(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "n1.1", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "n1", "fieldPath": "spec"},
            "reason": "Synced",
            "message": "Node synced",
            "type": "Normal",
            "source": {"component": "cloud-node-controller"},
            "firstTimestamp": "2026-01-01T00:00:00Z",
            "lastTimestamp": "2026-01-01T00:00:30Z",
            "count": 2,
        }
    )


EXPLAIN_TAINTS = re.compile(
    r"FIELD: taints <\[\]Taint>.*DESCRIPTION:\s+If specified, the node's taints\..*"
    r"effect\s+<string> -required-.*Possible enum values:.*"
    r"`\"NoExecute\"` Evict any already-running pods.*key\s+<string> -required-.*"
    r"timeAdded\s+<string>.*value\s+<string>",
    re.S,
)
EXPLAIN_TYPE = re.compile(
    r"FIELD: type <string>.*type determines how the Service is exposed\. Defaults to\s+"
    r"ClusterIP\..*Possible enum values:\s+- `\"ClusterIP\"` means a service will only be\s+"
    r"accessible inside the cluster,\s+via the cluster IP\.",
    re.S,
)


def steps(files: dict[str, Path], python: str) -> list[Step]:
    editor = (
        f'{python} -c "import sys,pathlib; p=pathlib.Path(sys.argv[1]); '
        "p.write_text(p.read_text().replace('tier: back','tier: edited'))\""
    )
    return [
        # typed creates (protobuf bodies on kubectl 1.32+)
        step(
            "create",
            "create",
            "namespace",
            "team-a",
            shows="namespace/team-a created",
            check=protobuf_created("Namespace", "team-a", ""),
        ),
        step(
            "create",
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=2",
            shows="deployment.apps/web created",
            check=replicas(2),
        ),
        step(
            "create",
            "create",
            "service",
            "loadbalancer",
            "edge",
            "--tcp=443:8443",
            shows="service/edge created",
            check=protobuf_created("Service", "edge"),
        ),
        step(
            "create",
            "create",
            "service",
            "clusterip",
            "cip",
            "--tcp=53:53",
            shows="service/cip created",
        ),
        step(
            "create",
            "create",
            "service",
            "nodeport",
            "np",
            "--tcp=80:8080",
            shows="service/np created",
        ),
        step(
            "create",
            "create",
            "configmap",
            "cm",
            "--from-literal=a=1",
            shows="configmap/cm created",
        ),
        step(
            "create",
            "create",
            "secret",
            "generic",
            "sec",
            "--from-literal=k=v",
            shows="secret/sec created",
        ),
        step("create", "create", "serviceaccount", "robot", shows="serviceaccount/robot created"),
        step("create", "create", "token", "robot", check=jwt),
        step(
            "create",
            "create",
            "role",
            "reader",
            "--verb=get",
            "--resource=pods",
            shows="role.rbac.authorization.k8s.io/reader created",
        ),
        step(
            "create",
            "create",
            "rolebinding",
            "reader",
            "--role=reader",
            "--serviceaccount=default:robot",
            shows="rolebinding.rbac.authorization.k8s.io/reader created",
        ),
        step(
            "create",
            "create",
            "clusterrole",
            "creader",
            "--verb=get",
            "--resource=nodes",
            shows="clusterrole.rbac.authorization.k8s.io/creader created",
        ),
        step(
            "create",
            "create",
            "clusterrolebinding",
            "creader",
            "--clusterrole=creader",
            "--user=alice",
            "--group=devs",
            "--serviceaccount=default:robot",
            shows="clusterrolebinding.rbac.authorization.k8s.io/creader created",
        ),
        # auth
        step("auth", "auth", "can-i", "list", "pods", shows="yes"),
        step("auth", "auth", "whoami", shows=r"Username\s+system:admin"),
        # manifests with the default validation (OpenAPI v2 on 1.27/1.28, v3 after)
        step("apply", "apply", "-f", str(files["service"]), shows="service/applied created"),
        step(
            "apply",
            "diff",
            "-f",
            str(files["service-changed"]),
            rc=1,
            shows=r"-    tier: front\n\+    tier: back",
        ),
        step(
            "apply",
            "apply",
            "-f",
            str(files["service-changed"]),
            shows="service/applied configured",
            check=label_is("back"),
        ),
        step(
            "apply",
            "replace",
            "-f",
            str(files["service-changed"]),
            shows="service/applied replaced",
        ),
        step(
            "apply",
            "edit",
            "service",
            "applied",
            shows="service/applied edited",
            env={"KUBE_EDITOR": editor},
            check=label_is("edited"),
        ),
        step(
            "apply",
            "create",
            "-f",
            str(files["unknown-field"]),
            rc=1,
            shows=r'unknown field "spec\.typ"',
        ),
        step(
            "apply",
            "create",
            "--dry-run=server",
            "-f",
            str(files["owner"]),
            shows=r"deployment\.apps/owner created \(server dry run\)",
            check=gone("apps/v1", "Deployment", "owner"),
        ),
        # server-side apply
        step(
            "server-side-apply",
            "apply",
            "--server-side",
            "-f",
            str(files["service"]),
            rc=1,
            shows=r"conflict with \"kubectl-edit\".*\.metadata\.labels\.tier",
        ),
        step(
            "server-side-apply",
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            str(files["service"]),
            shows="service/applied serverside-applied",
            check=ssa_owned,
        ),
        # explain
        step("explain", "explain", "node.spec.taints", shows=EXPLAIN_TAINTS.pattern),
        step("explain", "explain", "service.spec.type", shows=EXPLAIN_TYPE.pattern),
        # scale, tables
        step(
            "scale",
            "scale",
            "deployment",
            "web",
            "--replicas=5",
            shows="deployment.apps/web scaled",
            check=replicas(5),
        ),
        step(
            "scale",
            "scale",
            "deployment",
            "web",
            "--current-replicas=5",
            "--replicas=1",
            shows="deployment.apps/web scaled",
            check=replicas(1),
        ),
        step(
            "get",
            "get",
            "deployments",
            "-o",
            "wide",
            shows=r"NAME\s+READY\s+UP-TO-DATE\s+AVAILABLE\s+AGE\s+CONTAINERS\s+IMAGES\s+"
            r"SELECTOR\nweb\s+0/1\s+0\s+0\s+\S+\s+nginx\s+nginx:1\.27\s+app=web",
        ),
        step("get", "get", "pods", shows="No resources found in default namespace."),
        step(
            "get",
            "get",
            "events",
            "-o",
            "wide",
            shows=r"LAST SEEN\s+TYPE\s+REASON\s+OBJECT\s+SUBOBJECT\s+SOURCE\s+MESSAGE\s+"
            r"FIRST SEEN\s+COUNT\s+NAME|No resources found",
        ),
        step(
            "get",
            "get",
            "clusterrolebinding",
            "creader",
            "-o",
            "wide",
            shows=r"NAME\s+ROLE\s+AGE\s+USERS\s+GROUPS\s+SERVICEACCOUNTS\ncreader\s+"
            r"ClusterRole/creader\s+\S+\s+alice\s+devs\s+default/robot",
        ),
        step("get", "get", "daemonsets", shows="No resources found in default namespace."),
        step(
            "get",
            "get",
            "leases",
            "-n",
            "kube-node-lease",
            shows="No resources found in kube-node-lease namespace.",
        ),
        # deletion
        step("delete", "apply", "-f", str(files["owner"]), shows="deployment.apps/owner created"),
        step(
            "delete",
            "delete",
            "deployment",
            "owner",
            "--cascade=foreground",
            shows='deployment.apps "owner" deleted',
            check=foreground_done,
        ),
        step("delete", "apply", "-f", str(files["owner2"]), shows="deployment.apps/owner2 created"),
        step(
            "delete",
            "delete",
            "deployment",
            "owner2",
            "--cascade=orphan",
            shows='deployment.apps "owner2" deleted',
            check=orphaned,
        ),
        step(
            "delete",
            "delete",
            "--raw",
            "/api/v1/namespaces/default/configmaps/cm?propagationPolicy=Bogus",
            rc=1,
            shows=r"propagationPolicy: Unsupported value: \"Bogus\"",
        ),
        step(
            "delete",
            "delete",
            "deployment",
            "web",
            shows='deployment.apps "web" deleted',
            check=gone("apps/v1", "Deployment", "web"),
        ),
    ]


async def run_matrix(kubectl: Kubectl, em: Emulator, workdir: Path) -> list[str]:
    """Run every step; return a description of each failure."""
    files = manifests(workdir)
    failures: list[str] = []
    for item in steps(files, sys.executable):
        try:  # what kubectl cannot make, made from Python (after the steps it relies on)
            if item.args[:3] == ("delete", "deployment", "owner"):
                owned_configmap(em, "owned", "owner")
            if item.args[:3] == ("delete", "deployment", "owner2"):
                owned_configmap(em, "owned2", "owner2")
            if item.args[:2] == ("get", "events"):
                an_event(em)
        except AssertionError as exc:
            failures.append(f"[{item.group}] set-up for kubectl {' '.join(item.args)}: {exc}")
            continue
        run = await kubectl.run(*item.args, env=item.env or None)
        output = run.stdout + run.stderr
        problem = ""
        if run.returncode != item.rc:
            problem = f"exit {run.returncode}, expected {item.rc}"
        elif item.shows and not re.search(item.shows, output, re.S):
            problem = f"output does not show {item.shows!r}"
        elif item.check is not None:
            try:
                item.check(em, run)
            except AssertionError as exc:
                problem = f"server state: {exc}"
        if problem:
            failures.append(f"[{item.group}] kubectl {' '.join(item.args)}: {problem}\n{output}")
    return failures


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
async def test_every_command_on_every_kubectl(version: str, tmp_path: Path) -> None:
    """Every step of the table gives the expected exit code, output and server state."""
    binary = kubectl_binary(version)
    assert binary is not None
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            em = await start_emulator(nursery, tmp_path / "emulator")
            kubectl = Kubectl(version, binary, em.kubeconfig, tmp_path / "cache")
            failures = await run_matrix(kubectl, em, tmp_path)
            nursery.cancel_scope.cancel()
    assert not failures, f"kubectl {version}:\n" + "\n".join(failures)
