"""deploy/ and the Dockerfile: the manifests match the Kubernetes 1.32 and 1.33 schemas,
carry what a CCM needs (issue 7), start with trio-ccm's own flag parser, and
`kubectl apply -k` installs them on the emulator; the image is slim, pinned and non-root."""

from __future__ import annotations

import fnmatch
import functools
import json
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import trio
import yaml
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

from trio_ccm.cli.flags import parse_flags
from trio_ccm.cloud.registry import available_providers, load_provider
from trio_ccm.kube.wellknown import CONTROLLER_ALIASES
from trio_ccm.settings import Settings
from trio_ccm_testbed.apiserver import ApiServer, Listening, serve_apiserver

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MANIFESTS = ("rbac.yaml", "deployment.yaml", "daemonset.yaml")
# The kubectl on PATH is 1.32 and the emulator speaks 1.33: check against both schemas.
SCHEMA_VERSIONS = ("1.32.0", "1.33.0")
NAMESPACE = "kube-system"
NAME = "cloud-controller-manager"
CONFIG_MAP = "cloud-controller-manager-config"
PORT = 10258
TMP = "/tmp"  # noqa: S108 - a path inside the container, compared, never opened
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")

Doc = dict[str, Any]


# -- loading -----------------------------------------------------------------------------------
def load(path: Path) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kustomize(directory: Path) -> list[Doc]:
    """`kubectl kustomize DIR`, as `kubectl apply -k DIR` builds it."""
    assert KUBECTL is not None
    done = subprocess.run(
        [KUBECTL, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def control_plane_variant(directory: Path) -> Path:
    """A copy of deploy/ switched to the DaemonSet the way kustomization.yaml says to."""
    shutil.copytree(DEPLOY, directory, ignore=shutil.ignore_patterns("*.lock"))
    kustomization = directory / "kustomization.yaml"
    text = kustomization.read_text()
    assert text.count("\n  - deployment.yaml\n") == 1, "the documented switch line is missing"
    kustomization.write_text(text.replace("\n  - deployment.yaml\n", "\n  - daemonset.yaml\n"))
    return directory


def identity(doc: Doc) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def one(docs: list[Doc], kind: str) -> Doc:
    [found] = [doc for doc in docs if doc["kind"] == kind]
    return found


@pytest.fixture(scope="module")
def built() -> list[Doc]:
    if KUBECTL is None:
        pytest.skip("kubectl is not on PATH")
    return kustomize(DEPLOY)


@pytest.fixture(scope="module")
def built_control_plane(tmp_path_factory: pytest.TempPathFactory) -> list[Doc]:
    if KUBECTL is None:
        pytest.skip("kubectl is not on PATH")
    return kustomize(control_plane_variant(tmp_path_factory.mktemp("variant") / "deploy"))


RBAC = load(DEPLOY / "rbac.yaml")
DEPLOYMENT = one(load(DEPLOY / "deployment.yaml"), "Deployment")
DAEMONSET = one(load(DEPLOY / "daemonset.yaml"), "DaemonSet")
WORKLOADS = [
    pytest.param(DEPLOYMENT, id="deployment"),
    pytest.param(DAEMONSET, id="daemonset"),
]


def container(workload: Doc) -> Doc:
    [only] = workload["spec"]["template"]["spec"]["containers"]
    return only


def settings_of(workload: Doc) -> Settings:
    return parse_flags(container(workload)["args"], controller_aliases=CONTROLLER_ALIASES)


# -- Kubernetes schemas -----------------------------------------------------------------------
@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("manifest", MANIFESTS)
def test_manifest_documents_match_schemas(manifest: str, version: str) -> None:
    """Every document of every manifest is valid for Kubernetes 1.32 and 1.33 (strict: an
    unknown or misspelt field fails)."""
    docs = load(DEPLOY / manifest)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_kustomize_output_matches_schemas(
    built: list[Doc], built_control_plane: list[Doc], version: str
) -> None:
    """What `kubectl apply -k` sends, for both variants, is valid for 1.32 and 1.33."""
    for doc in [*built, *built_control_plane]:
        kubernetes_validate.validate(doc, version, strict=True)


# -- the kustomization ------------------------------------------------------------------------
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


@pytest.mark.parametrize(
    ("variant", "workload_kind"),
    [
        pytest.param("built", "Deployment", id="deployment"),
        pytest.param("built_control_plane", "DaemonSet", id="control-plane"),
    ],
)
def test_kustomization_installs_rbac_config_and_one_workload(
    request: pytest.FixtureRequest, variant: str, workload_kind: str
) -> None:
    """`apply -k` installs rbac.yaml, the cloud config as a hash-named ConfigMap that the
    Pods mount, and exactly one of the two workloads."""
    docs: list[Doc] = request.getfixturevalue(variant)
    assert sorted(doc["kind"] for doc in docs) == sorted([*RBAC_KINDS, "ConfigMap", workload_kind])
    rbac = [doc for doc in docs if doc["kind"] in RBAC_KINDS]
    assert sorted(rbac, key=identity) == sorted(RBAC, key=identity)  # unchanged, reordered
    config_map = one(docs, "ConfigMap")
    assert config_map["metadata"]["namespace"] == NAMESPACE
    assert re.fullmatch(rf"{CONFIG_MAP}-[a-z0-9]{{10}}", config_map["metadata"]["name"])
    assert config_map["data"] == {"cloud.yaml": (DEPLOY / "cloud-config.yaml").read_text()}
    workload = one(docs, workload_kind)
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    assert volumes["cloud-config"]["configMap"]["name"] == config_map["metadata"]["name"]


def test_cloud_config_is_accepted_by_the_provider_named_in_the_args() -> None:
    """cloud-config.yaml is a valid config for the provider --cloud-provider names."""
    settings = settings_of(DEPLOYMENT)
    assert settings.cloud_provider in available_providers()
    provider = load_provider(settings.cloud_provider, (DEPLOY / "cloud-config.yaml").read_bytes())
    assert provider.name == settings.cloud_provider


# -- what a CCM Pod needs ---------------------------------------------------------------------
def tolerates(tolerations: list[Doc], key: str, value: str, effect: str) -> bool:
    """Whether a taint is tolerated, by upstream's rules (v1.Toleration.ToleratesTaint)."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != effect:
            continue
        if toleration.get("key", "") not in ("", key):
            continue
        if not toleration.get("key") and toleration.get("operator") != "Exists":
            continue
        operator = toleration.get("operator", "Equal")
        if operator == "Exists" or toleration.get("value", "") == value:
            return True
    return False


REQUIRED_TAINTS = [
    # The CCM is what removes this one: without the toleration it never schedules.
    ("node.cloudprovider.kubernetes.io/uninitialized", "true", "NoSchedule"),
    ("node-role.kubernetes.io/control-plane", "", "NoSchedule"),
    ("CriticalAddonsOnly", "true", "NoSchedule"),
    ("node.kubernetes.io/not-ready", "", "NoExecute"),
]


@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize(("key", "value", "effect"), REQUIRED_TAINTS)
def test_tolerates_the_taints_of_nodes_it_must_run_on(
    workload: Doc, key: str, value: str, effect: str
) -> None:
    """The Pods tolerate uninitialised, control-plane, critical-addons-only and not-ready
    Nodes."""
    assert tolerates(workload["spec"]["template"]["spec"]["tolerations"], key, value, effect)


def test_tolerates_matches_upstream_rules() -> None:
    """The toleration check itself: a key with the wrong value or effect does not tolerate."""
    equal = [{"key": "k", "value": "true", "effect": "NoSchedule"}]
    assert tolerates(equal, "k", "true", "NoSchedule")
    assert not tolerates(equal, "k", "false", "NoSchedule")
    assert not tolerates(equal, "k", "true", "NoExecute")
    assert tolerates([{"operator": "Exists"}], "any", "x", "NoExecute")
    assert not tolerates([{"key": "other", "operator": "Exists"}], "k", "", "NoSchedule")


@pytest.mark.parametrize("workload", WORKLOADS)
def test_probes_use_the_secure_port(workload: Doc) -> None:
    """Liveness is HTTPS GET /healthz and readiness HTTPS GET /readyz on the port the args
    serve (TLS with a self-signed certificate, as trio-ccm serves by default)."""
    c = container(workload)
    settings = settings_of(workload)
    assert settings.secure_port == PORT
    assert not settings.plain_http
    assert [p["containerPort"] for p in c["ports"]] == [PORT]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert c[probe]["httpGet"] == {"path": path, "port": PORT, "scheme": "HTTPS"}, probe


@pytest.mark.parametrize("workload", WORKLOADS)
def test_runs_non_root_on_a_read_only_root(workload: Doc) -> None:
    """Non-root with a fixed UID, read-only root filesystem, no privilege escalation, no
    capabilities, the runtime's seccomp profile; /tmp is a writable emptyDir (the serving
    certificate passes through a temporary file)."""
    pod = workload["spec"]["template"]["spec"]
    c = container(workload)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["runAsGroup"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    [tmp] = [m for m in c["volumeMounts"] if m["mountPath"] == TMP]
    assert "emptyDir" in volumes[tmp["name"]]
    assert not tmp.get("readOnly", False)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_requests_resources_and_limits_memory(workload: Doc) -> None:
    """CPU and memory are requested and memory is limited."""
    resources = container(workload)["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert "memory" in resources["limits"]


@pytest.mark.parametrize("workload", WORKLOADS)
def test_args_parse_with_trio_ccms_own_parser(workload: Doc) -> None:
    """The args are accepted by trio-ccm's flag parser: leader election on, a known
    provider, its config mounted where --cloud-config points, no flag ignored, and routes
    off unless a cluster CIDR is given (the route controller exits 1 without one)."""
    settings = settings_of(workload)
    assert settings.leader_elect is True
    assert settings.leader_elect_resource_namespace == NAMESPACE
    assert settings.cloud_provider in available_providers()
    assert settings.ignored_flags == ()
    assert settings.configure_cloud_routes is False or settings.cluster_cidr
    mounts = {m["mountPath"]: m for m in container(workload)["volumeMounts"]}
    config = Path(settings.cloud_config)
    mount = mounts[str(config.parent)]
    assert mount["readOnly"] is True
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mount["name"]]["configMap"]["name"] == CONFIG_MAP
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    [generator] = kustomization["configMapGenerator"]
    assert generator["name"] == CONFIG_MAP
    assert generator["files"] == [f"{config.name}=cloud-config.yaml"]


@pytest.mark.parametrize("workload", WORKLOADS)
def test_runs_as_the_rbac_service_account(workload: Doc) -> None:
    """The Pods run as rbac.yaml's ServiceAccount, in its namespace, which every binding
    names."""
    account = one(RBAC, "ServiceAccount")["metadata"]
    assert workload["metadata"]["namespace"] == account["namespace"] == NAMESPACE
    assert workload["spec"]["template"]["spec"]["serviceAccountName"] == account["name"]
    for binding in (doc for doc in RBAC if doc["kind"].endswith("Binding")):
        assert {"kind": "ServiceAccount", **account} in binding["subjects"], binding


@pytest.mark.parametrize("workload", WORKLOADS)
def test_gives_the_graceful_shutdown_time_to_finish(workload: Doc) -> None:
    """The termination grace covers trio-ccm's 10 s drain plus the Lease release
    (docs/operations.md: at least 20 s)."""
    assert workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 20


@pytest.mark.parametrize("workload", WORKLOADS)
def test_selector_matches_the_pod_labels(workload: Doc) -> None:
    """The selector picks the template's Pods (the API server refuses it otherwise)."""
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_deployment_runs_two_spread_replicas() -> None:
    """Two cluster-critical replicas, preferably on different Nodes, rolled one at a time
    without ever dropping below two."""
    spec = DEPLOYMENT["spec"]
    assert DEPLOYMENT["metadata"]["name"] == NAME
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = spec["template"]["spec"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    [term] = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selected = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
    assert selected.items() <= spec["template"]["metadata"]["labels"].items()


def test_daemonset_runs_on_control_plane_host_network() -> None:
    """The DaemonSet runs node-critical on control-plane Nodes, on the host network with
    the host's resolver, rolled one Node at a time, with the Deployment's container."""
    spec = DAEMONSET["spec"]
    pod = spec["template"]["spec"]
    assert DAEMONSET["metadata"]["name"] == NAME
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "Default"
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert pod["priorityClassName"] == "system-node-critical"
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    assert container(DAEMONSET) == container(DEPLOYMENT)
    deployment_pod = DEPLOYMENT["spec"]["template"]["spec"]
    for shared in ("securityContext", "tolerations", "volumes", "serviceAccountName"):
        assert pod[shared] == deployment_pod[shared], shared


# -- kubectl apply -k against the emulator ----------------------------------------------------
async def kubectl(kubeconfig: Path, *args: str) -> str:
    assert KUBECTL is not None
    command = [
        KUBECTL,
        f"--kubeconfig={kubeconfig}",
        f"--cache-dir={kubeconfig.parent / 'cache'}",
        "--request-timeout=20s",
        *args,
    ]
    done = await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr.decode()}"
    return done.stdout.decode()


@needs_kubectl
@pytest.mark.kubectl
@pytest.mark.parametrize(
    ("variant", "resource"),
    [pytest.param(None, "deployment", id="deployment"), pytest.param("cp", "daemonset", id="cp")],
)
async def test_kubectl_apply_k_installs_on_the_emulator(
    nursery: trio.Nursery, tmp_path: Path, variant: str | None, resource: str
) -> None:
    """`kubectl apply -k` of deploy/ (and of its control-plane switch) succeeds against the
    emulator, and `kubectl get` shows the workload as written; a second apply changes
    nothing."""
    directory = DEPLOY if variant is None else control_plane_variant(tmp_path / "deploy")
    server = ApiServer(seed=1)
    listening: Listening = await nursery.start(functools.partial(serve_apiserver, server))
    kubeconfig = listening.write_kubeconfig(tmp_path / "kubeconfig")
    with trio.fail_after(60):
        applied = await kubectl(kubeconfig, "apply", "-k", str(directory))
        again = await kubectl(kubeconfig, "apply", "-k", str(directory))
        got = json.loads(
            await kubectl(kubeconfig, "get", resource, "-n", NAMESPACE, NAME, "-o=json")
        )
    assert f"{resource}.apps/{NAME} created" in applied.splitlines()
    assert len(applied.splitlines()) == len(RBAC_KINDS) + 2  # + ConfigMap + the workload
    assert all(line.endswith(" unchanged") for line in again.splitlines()), again
    written = DEPLOYMENT if resource == "deployment" else DAEMONSET
    assert got["metadata"]["generation"] == 1
    assert got["spec"]["selector"] == written["spec"]["selector"]
    if resource == "deployment":
        assert got["spec"]["replicas"] == 2
    stored = got["spec"]["template"]["spec"]
    assert stored["containers"][0]["args"] == container(written)["args"]
    assert stored["containers"][0]["image"] == container(written)["image"]
    assert stored["serviceAccountName"] == NAME
    account = server.get("v1", "ServiceAccount", NAME, namespace=NAMESPACE)
    assert account["metadata"]["name"] == NAME


# -- the image ----------------------------------------------------------------------------------
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments): comment lines dropped (also inside a continuation, as
    Docker does), continuation lines joined."""
    found: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += " " + stripped.removesuffix("\\").strip()
        if not stripped.endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            found.append((word.upper(), rest.strip()))
            pending = ""
    return found


def stages(text: str) -> list[list[tuple[str, str]]]:
    """The instructions of each build stage (global ARGs before the first FROM left out)."""
    result: list[list[tuple[str, str]]] = []
    for instruction in instructions(text):
        if instruction[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def global_args(text: str) -> dict[str, str]:
    args = {}
    for word, rest in instructions(text):
        if word == "FROM":
            break
        if word == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args[name] = value
    return args


def base_image(stage: list[tuple[str, str]]) -> str:
    image = stage[0][1].split()[0]
    return re.sub(r"\$\{(\w+)\}", lambda m: global_args(DOCKERFILE)[m.group(1)], image)


def test_dockerfile_base_is_slim_and_pinned() -> None:
    """Every stage starts from a python slim image pinned to a patch release (no `latest`,
    no bare `3.12`); pinning by digest is allowed on top."""
    for stage in stages(DOCKERFILE):
        image = base_image(stage)
        assert re.fullmatch(r"python:3\.\d+\.\d+-slim(-[a-z]+)?(@sha256:[0-9a-f]{64})?", image)
        assert "latest" not in image


def test_dockerfile_runtime_stage_is_non_root_with_trio_ccm_entrypoint() -> None:
    """The final stage copies the built virtualenv, runs as a numeric non-root user, writes
    no bytecode and has `trio-ccm` as its entrypoint."""
    final = stages(DOCKERFILE)[-1]
    words = [word for word, _ in final]
    assert "RUN" not in words  # nothing installed or built in the runtime image
    [user] = [rest for word, rest in final if word == "USER"]
    uid, _, gid = user.partition(":")
    assert int(uid) > 0
    assert not gid or int(gid) > 0
    [entrypoint] = [rest for word, rest in final if word == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["trio-ccm"]
    env = " ".join(rest for word, rest in final if word == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert all("--from=builder" in rest for word, rest in final if word == "COPY")


def pip_installs(text: str) -> Iterator[str]:
    for word, rest in instructions(text):
        if word == "RUN":
            for command in rest.split("&&"):
                if re.search(r"\bpip\b.*\binstall\b", command):
                    yield command


def test_dockerfile_installs_locked_runtime_dependencies_only() -> None:
    """Dependencies come from the hashed lock, wheels only, no pip cache, a fixed
    SOURCE_DATE_EPOCH; trio-ccm goes in without its dependencies and without the test
    extra."""
    installs = list(pip_installs(DOCKERFILE))
    assert any("-r deploy/requirements.lock" in c and "--require-hashes" in c for c in installs)
    assert all("--only-binary=:all:" in c or "--no-index" in c for c in installs), installs
    assert all("--no-deps" in c for c in installs), installs
    assert all("[test]" not in c and ".[" not in c for c in installs), installs
    assert "PIP_NO_CACHE_DIR=1" in DOCKERFILE
    assert re.search(r"^ARG SOURCE_DATE_EPOCH=\d+$", DOCKERFILE, re.MULTILINE)


LOCK = (DEPLOY / "requirements.lock").read_text()


def locked() -> dict[NormalizedName, tuple[str, list[str]]]:
    """name -> (version, hashes) of each requirement in the lock."""
    entries = {}
    for block in re.sub(r"\\\n", " ", LOCK).splitlines():
        block = block.split("#", 1)[0].strip()
        if not block:
            continue
        words = shlex.split(block)
        requirement = Requirement(words[0])
        [specifier] = list(requirement.specifier)
        assert specifier.operator == "==", block
        hashes = [w.removeprefix("--hash=sha256:") for w in words[1:]]
        assert hashes, block
        assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), block
        entries[canonicalize_name(requirement.name)] = (specifier.version, hashes)
    return entries


def project() -> Mapping[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_lock_pins_every_runtime_dependency_with_hashes() -> None:
    """deploy/requirements.lock pins every runtime dependency of pyproject.toml to a version
    its range allows, each with sha256 hashes, and holds none of the test extra."""
    pins = locked()
    for line in project()["dependencies"]:
        requirement = Requirement(line)
        version, _ = pins[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(version), (line, version)
    runtime = {canonicalize_name(Requirement(d).name) for d in project()["dependencies"]}
    test_only = {
        canonicalize_name(Requirement(d).name) for d in project()["optional-dependencies"]["test"]
    }
    assert not (test_only - runtime) & set(pins)


def dockerignore_includes(path: str) -> bool:
    """Whether the build context holds `path`, by .dockerignore's rules (last match wins;
    a pattern matching a directory matches what is below it)."""
    included = True
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.removeprefix("!").strip("/")
        parts = path.split("/")
        if pattern.startswith("**/"):  # one name at any depth (all this file uses)
            matched = any(fnmatch.fnmatchcase(part, pattern[3:]) for part in parts)
        else:
            prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
            matched = any(fnmatch.fnmatchcase(p, pattern) for p in prefixes)
        if matched:
            included = negated
    return included


@pytest.mark.parametrize(
    ("path", "included"),
    [
        pytest.param("pyproject.toml", True, id="pyproject"),
        pytest.param("README.md", True, id="readme"),
        pytest.param("src/trio_ccm/cli.py", True, id="src"),
        pytest.param("deploy/requirements.lock", True, id="lock"),
        pytest.param(".venv/bin/python", False, id="venv"),
        pytest.param(".git/HEAD", False, id="git"),
        pytest.param("tests/unit/test_settings.py", False, id="tests"),
        pytest.param("bench/apiserver.py", False, id="bench"),
        pytest.param("docs/operations.md", False, id="docs"),
        pytest.param("kubeconfig", False, id="stray-kubeconfig"),
        pytest.param("src/trio_ccm/__pycache__/cli.cpython-312.pyc", False, id="bytecode"),
        pytest.param("src/trio_ccm.egg-info/PKG-INFO", False, id="egg-info"),
    ],
)
def test_dockerignore_keeps_the_context_to_what_the_build_reads(path: str, included: bool) -> None:
    """The build context holds the sources, the lock and the metadata, nothing else."""
    assert dockerignore_includes(path) is included


def test_dockerfile_copies_only_what_the_context_holds() -> None:
    """Every file the Dockerfile copies from the context is let through by .dockerignore."""
    for word, rest in instructions(DOCKERFILE):
        if word == "COPY" and "--from=" not in rest:
            *sources, _ = rest.split()
            for source in sources:
                probe = f"{source}/any.py" if (ROOT / source).is_dir() else source
                assert (ROOT / source).exists(), source
                assert dockerignore_includes(probe), source
