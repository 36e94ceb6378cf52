"""deploy/rbac.yaml proved: two replicas run every controller path against the emulator
with RBAC enforced from that file alone, authenticated as its ServiceAccount.

With the file as written nothing is refused and every path has its effect; with any one
rule, or any one verb of a rule, taken out, some path meets a 403 for exactly that
permission, and trio-ccm's log names the verb, the resource, the account and the fix.
Together: the file is sufficient and nothing in it is spare.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import msgspec
import pytest
import structlog
import trio
import trio.testing
import yaml
from prometheus_client import CollectorRegistry

from trio_ccm.cloud.sim import SimProvider, provider_id
from trio_ccm.kube.config import ConnectionConfig, StaticCredentials
from trio_ccm.kube.errors import ForbiddenError, error_from_response
from trio_ccm.settings import Settings
from trio_ccm.supervisor import Serving, serve
from trio_ccm.testing.factories import TAINT_UNINITIALIZED, make_node
from trio_ccm.testing.harness import virtual_now
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.cloud import SimCloud

RBAC_FILE = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"
ADMIN_TOKEN = "admin-token"
SA_NAMESPACE, SA_NAME = "kube-system", "cloud-controller-manager"
SA_USER = f"system:serviceaccount:{SA_NAMESPACE}:{SA_NAME}"
SHUTDOWN = "node.cloudprovider.kubernetes.io/shutdown"
FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
# The IPAM write to this Node meets a concurrent assignment (the test's admin writes it first).
RACED_NODE, RACED_CIDR = "node-b", "10.244.99.0/24"
MOVED_IP = "10.1.2.3"  # node-a's new internal address, picked up by the periodic sync
RULE_KINDS = ("ClusterRole", "Role")
VISIBLE_LEVELS = frozenset({"info", "warning", "error", "critical"})  # trio-ccm's default: info


class QuietReportError(AssertionError):
    """A refusal is reported only below the default log level."""


def ccm_settings() -> Settings:
    """Every controller, IPAM included, under leader election; a short address-sync period
    so that its path runs within the scenario."""
    return Settings(
        secure_port=0,
        cloud_provider="sim",
        cloud_batch_window_s=0.02,
        leader_elect=True,
        controllers=("*",),
        cluster_cidr="10.244.0.0/16",
        allocate_node_cidrs=True,
        node_status_update_frequency_s=20.0,
    )


now = virtual_now()


# -- the manifest, and what it grants ------------------------------------------------------
def load_manifest() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(RBAC_FILE.read_text()) if doc]


@dataclass(frozen=True)
class Grant:
    """One rule of one Role or ClusterRole of the manifest."""

    doc: int
    index: int
    kind: str
    rule: Mapping[str, Any]

    @property
    def id(self) -> str:
        """`ClusterRole/nodes`, `Role/leases[cloud-controller-manager]` (resourceNames)."""
        names = self.rule.get("resourceNames") or []
        limit = f"[{','.join(names)}]" if names else ""
        return f"{self.kind}/{'+'.join(self.rule['resources'])}{limit}"

    @property
    def verbs(self) -> list[str]:
        return list(self.rule["verbs"])

    def permissions(self, verbs: list[str] | None = None) -> set[tuple[str, str, str]]:
        """(verb, API group, resource[/subresource]) for these verbs (all by default)."""
        return {
            (verb, group, resource)
            for verb in (self.verbs if verbs is None else verbs)
            for group in self.rule["apiGroups"]
            for resource in self.rule["resources"]
        }


def grants(docs: list[dict[str, Any]]) -> list[Grant]:
    return [
        Grant(d, i, doc["kind"], rule)
        for d, doc in enumerate(docs)
        if doc["kind"] in RULE_KINDS
        for i, rule in enumerate(doc.get("rules") or [])
    ]


def without(docs: list[dict[str, Any]], grant: Grant, verb: str | None = None) -> list[Any]:
    """The manifest with `grant` removed, or with only `verb` removed from it (a rule's
    last verb goes with the rule: a rule without verbs is invalid)."""
    changed = copy.deepcopy(docs)
    rules = changed[grant.doc]["rules"]
    kept = [v for v in grant.verbs if v != verb] if verb is not None else []
    if kept:
        rules[grant.index]["verbs"] = kept
    else:
        del rules[grant.index]
    return changed


MANIFEST = load_manifest()
GRANTS = grants(MANIFEST)


# -- what the CCM asked, and what the emulator answered ---------------------------------------
@dataclass(frozen=True)
class Answer:
    """One request of a replica, as the RBAC authorizer sees it, and its status code."""

    replica: str
    method: str
    path: str
    verb: str
    group: str
    resource: str  # with "/subresource"
    namespace: str
    name: str
    status: int

    @classmethod
    def of(cls, replica: str, request: httpx.Request, status: int) -> Answer:
        path = request.url.path
        query = parse_qs(request.url.query.decode(), keep_blank_values=True)
        parts = [p for p in path.split("/") if p]
        group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        resource = rest[0]
        name = rest[1] if len(rest) > 1 else ""
        if len(rest) > 2:
            resource += "/" + rest[2]
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(request.method, "")
        if request.method == "DELETE":
            verb = "delete" if name else "deletecollection"
        if request.method == "GET":
            verb = "get"
            if not name:
                verb = "watch" if query.get("watch", [""])[0] in ("1", "true") else "list"
                selector = query.get("fieldSelector", [""])[0]
                if selector.startswith("metadata.name="):
                    name = selector.removeprefix("metadata.name=")
        return cls(replica, request.method, path, verb, group, resource, namespace, name, status)

    @property
    def permission(self) -> tuple[str, str, str]:
        return (self.verb, self.group, self.resource)


Hook = tuple[str, str, bytes, Callable[[], Awaitable[None]]]
"""(method, path, body fragment, coroutine): run once before the first matching request."""


class RecordingTransport(httpx.AsyncBaseTransport):
    """A replica's way to the emulator: records every answer; runs a one-shot hook before a
    matching request (a concurrent writer getting there first)."""

    def __init__(
        self, api: ApiServer, replica: str, answers: list[Answer], hooks: list[Hook]
    ) -> None:
        self.inner = api.transport()
        self.replica = replica
        self.answers = answers
        self.hooks = hooks  # shared by the replicas

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        for entry in list(self.hooks):
            method, path, fragment, hook = entry
            if (request.method, request.url.path) == (method, path) and fragment in (
                request.content
            ):
                self.hooks.remove(entry)
                await hook()
        response: httpx.Response = await self.inner.handle_async_request(request)
        self.answers.append(Answer.of(self.replica, request, response.status_code))
        return response


# -- the scenario ---------------------------------------------------------------------------
@dataclass
class Outcome:
    api: ApiServer
    cloud: SimCloud
    answers: list[Answer]
    logs: list[MutableMapping[str, Any]]
    service_ensured: dict[str, Any] | None = None  # the Service just before it was deleted
    backends_ensured: tuple[str, ...] = ()  # its load balancer's Nodes then
    leaders: dict[str, bool] = field(default_factory=dict)  # replica -> led at some point

    def denied(self) -> set[tuple[str, str, str]]:
        return {a.permission for a in self.answers if a.status == 403}

    def allowed(self) -> set[tuple[str, str, str]]:
        return {a.permission for a in self.answers if a.status < 400 or a.status == 404}

    def node(self, name: str) -> dict[str, Any] | None:
        stored = self.api.store.lookup(self.api.type_for("v1", "Node"), "", name)
        return None if stored is None else self.api.get("v1", "Node", name)

    def events(self) -> list[dict[str, Any]]:
        rtype = self.api.type_for("v1", "Event")
        return [s.obj for s in self.api.store.storage(rtype).objects.values()]

    def reports(self, verb: str, resource: str) -> list[MutableMapping[str, Any]]:
        """The log entries that report this refusal: the verb, the resource, the account
        and the fix (searched in the entry's fields and its exception's whole chain)."""
        wanted = (
            f'cannot {verb} resource "{resource}"',
            f'must grant verb "{verb}" on "{resource}"',
            SA_USER,
            "deploy/rbac.yaml",
        )
        return [entry for entry in self.logs if all(w in render(entry) for w in wanted)]

    def check_reported(self, permission: tuple[str, str, str]) -> None:
        """Some log entry reports this refusal, at a level shown by default (info)."""
        verb, _group, resource = permission
        reports = self.reports(verb, resource)
        assert reports, f"no log line reports the refused {verb} on {resource}"
        levels = {entry["log_level"] for entry in reports}
        if not levels & VISIBLE_LEVELS:
            raise QuietReportError(
                f"the refused {verb} on {resource} is logged only at {sorted(levels)} "
                f"({sorted({entry['event'] for entry in reports})}), hidden by default"
            )


def render(entry: Mapping[str, Any]) -> str:
    """A captured log entry as one text: its fields and its exception's whole chain."""
    parts = [f"{key}={value}" for key, value in entry.items() if key != "exc_info"]
    exc = entry.get("exc_info")
    seen: set[int] = set()
    while isinstance(exc, BaseException) and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return " ".join(parts)


def register(
    api: ApiServer,
    name: str,
    *,
    ready: str = "True",
    initialized: str = "",
) -> None:
    """A Node as kubelet --cloud-provider=external registers it (or, with the provider ID
    `initialized`, as the CCM left it)."""
    api.create(make_node(name, ready=ready, uninitialized=not initialized, provider_id=initialized))


def web_service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
        },
    }


async def run_replica(
    api: ApiServer,
    cloud: SimCloud,
    transport: httpx.AsyncBaseTransport,
    token: str,
    name: str,
    *,
    task_status: trio.TaskStatus[Serving] = trio.TASK_STATUS_IGNORED,
) -> None:
    """One trio-ccm replica, authenticated as the ServiceAccount, until shut down."""
    provider = SimProvider(url="http://sim", replica=name, transport=cloud.transport())
    connection = ConnectionConfig(
        server="http://emulator",
        credentials=StaticCredentials(token=token),
        source="test emulator (ServiceAccount token)",
    )
    try:
        await serve(
            ccm_settings(),
            provider,
            connection=connection,
            transport=transport,
            registry=CollectorRegistry(),
            identity=name,
            now=now,
            rng=random.Random(name),
            task_status=task_status,
        )
    finally:
        await provider.aclose()


async def led_within(serving: Serving, seconds: float) -> bool:
    with trio.move_on_after(seconds):
        await serving.wait_leading()
        return True
    return False


async def run_scenario(docs: list[Any]) -> Outcome:
    """Every controller path, with RBAC from `docs` (see the module docstring); the same
    timeline whatever is refused, so that a refusal never hangs the test."""
    api = ApiServer(admin_token=ADMIN_TOKEN, rbac=True, seed=1, now=now)
    api.apply_objects(copy.deepcopy(docs))
    token = api.authn.issue_service_account(SA_NAMESPACE, SA_NAME)
    cloud = SimCloud(seed=1)
    answers: list[Answer] = []
    hooks: list[Hook] = []
    outcome = Outcome(api, cloud, answers, [])

    node_a = cloud.add_instance("node-a")
    cloud.add_instance("node-b")
    gone = cloud.add_instance("node-gone")
    stopped = cloud.add_instance("node-stopped")
    register(api, "node-a")
    register(api, "node-b")
    register(api, "node-gone", ready="Unknown", initialized=provider_id(gone.zone, gone.id))
    register(api, "node-stopped", ready="False", initialized=provider_id(stopped.zone, stopped.id))
    cloud.terminate(gone.id)
    cloud.stop(stopped.id)
    api.create(web_service())

    async with httpx.AsyncClient(
        transport=api.transport(),
        base_url="http://emulator",
        headers={"authorization": f"Bearer {ADMIN_TOKEN}"},
    ) as admin:

        async def assign_first() -> None:
            response = await admin.patch(
                f"/api/v1/nodes/{RACED_NODE}",
                json={"spec": {"podCIDR": RACED_CIDR, "podCIDRs": [RACED_CIDR]}},
                headers={"content-type": "application/merge-patch+json"},
            )
            response.raise_for_status()

        hooks.append(("PATCH", f"/api/v1/nodes/{RACED_NODE}", b"podCIDRs", assign_first))

        def transport(name: str) -> RecordingTransport:
            return RecordingTransport(api, name, answers, hooks)

        with structlog.testing.capture_logs() as logs:
            async with trio.open_nursery() as nursery:
                start = partial(run_replica, api, cloud)
                first: Serving = await nursery.start(start, transport("ccm-a"), token, "ccm-a")
                outcome.leaders["ccm-a"] = await led_within(first, 5)
                # A standby: it reads the Lease and watches it.
                second: Serving = await nursery.start(start, transport("ccm-b"), token, "ccm-b")
                # Initialisation, pod CIDRs (one raced), routes, lifecycle, the load balancer.
                await trio.sleep(15)
                # A new Node (a node-set change) and an address change for the periodic sync.
                cloud.add_instance("node-late")
                register(api, "node-late")
                cloud.set_addresses(node_a.id, internal=[MOVED_IP])
                await trio.sleep(ccm_settings().node_status_update_frequency_s + 5)
                outcome.service_ensured = api.get("v1", "Service", "web", "default")
                balancers = cloud.load_balancers()
                outcome.backends_ensured = balancers[0].nodes if balancers else ()
                (await admin.delete("/api/v1/namespaces/default/services/web")).raise_for_status()
                await trio.sleep(10)
                # A hands over: it releases the Lease, the standby sees that in its watch.
                first.shut_down()
                outcome.leaders["ccm-b"] = await led_within(second, 5)
                await trio.sleep(5)
                second.shut_down()
    outcome.logs = logs
    return outcome


# -- the tests ------------------------------------------------------------------------------
GRANT_PARAMS = [pytest.param(grant, id=grant.id) for grant in GRANTS]
VERB_PARAMS = [
    pytest.param(grant, verb, id=f"{grant.id}:{verb}") for grant in GRANTS for verb in grant.verbs
]


@pytest.mark.parametrize(
    ("path", "message", "fix"),
    [
        pytest.param(
            "/api/v1/nodes/n1/status",
            f'nodes "n1" is forbidden: User "{SA_USER}" cannot patch resource "nodes/status" '
            'in API group "" at the cluster scope',
            f'fix: the ClusterRole bound to "{SA_USER}" (deploy/rbac.yaml) must grant verb '
            '"patch" on "nodes/status" in API group ""',
            id="cluster-scope",
        ),
        pytest.param(
            LEASES,
            f'leases.coordination.k8s.io "cloud-controller-manager" is forbidden: User '
            f'"{SA_USER}" cannot watch resource "leases" in API group "coordination.k8s.io" in '
            'the namespace "kube-system": RBAC: role.rbac.authorization.k8s.io "x" not found',
            'fix: the Role in the namespace "kube-system" (or a ClusterRole) bound to '
            f'"{SA_USER}" (deploy/rbac.yaml) must grant verb "watch" on "leases" in API group '
            '"coordination.k8s.io"',
            id="namespace",
        ),
        pytest.param(
            "/metrics",
            f'forbidden: User "{SA_USER}" cannot get path "/metrics"',
            f'fix: a ClusterRole bound to "{SA_USER}" must grant verb "get" on the '
            'non-resource URL "/metrics"',
            id="non-resource-url",
        ),
        pytest.param(
            "/api/v1/namespaces/gone/events",
            'events "e1" is forbidden: unable to create new content in namespace gone because '
            "it is being terminated",
            "",
            id="not-an-authorization-denial",
        ),
    ],
)
def test_a_403_names_what_to_grant_to_whom(path: str, message: str, fix: str) -> None:
    """A refusal by the authorizer becomes an error naming the verb, the resource, the
    scope, the account and the RBAC fix; other 403s are left as the server worded them."""
    body = msgspec.json.encode(
        {"kind": "Status", "status": "Failure", "message": message, "code": 403}
        | {"reason": "Forbidden"}
    )
    error = error_from_response("GET", path, 403, body, {})
    assert isinstance(error, ForbiddenError)
    assert error.message == message
    expected = f"GET {path}: 403 Forbidden: {message}"
    assert str(error) == (f"{expected}; {fix}" if fix else expected)


def test_rule_ids_are_unique_and_cover_every_role() -> None:
    """Each rule of each Role/ClusterRole of deploy/rbac.yaml has its own test id."""
    ids = [g.id for g in GRANTS]
    assert len(ids) == len(set(ids)), ids
    assert {doc["kind"] for doc in MANIFEST if doc["kind"] in RULE_KINDS} == set(RULE_KINDS)


async def test_the_manifest_is_sufficient_and_every_path_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With deploy/rbac.yaml alone nothing is refused, every controller path has its effect,
    and every permission it grants is used."""
    with trio.fail_after(300):
        outcome = await run_scenario(MANIFEST)
    assert outcome.denied() == set()
    assert outcome.leaders == {"ccm-a": True, "ccm-b": True}

    # cloud-node-controller: initialised (addresses on nodes/status, then the JSON patch),
    # and the periodic sync picked up node-a's new address.
    for name in ("node-a", "node-b", "node-late"):
        node = outcome.node(name)
        assert node is not None
        assert node["spec"]["providerID"].startswith("sim://")
        assert TAINT_UNINITIALIZED not in [t["key"] for t in node["spec"].get("taints", [])]
    node_a = outcome.node("node-a")
    assert node_a is not None
    assert MOVED_IP in [a["address"] for a in node_a["status"]["addresses"]]
    # cloud-node-lifecycle-controller: the terminated instance's Node is gone, the stopped
    # one is tainted.
    assert outcome.node("node-gone") is None
    stopped = outcome.node("node-stopped")
    assert stopped is not None
    assert SHUTDOWN in [t["key"] for t in stopped["spec"].get("taints", [])]
    # IPAM: every Node has pod CIDRs; the raced one kept the concurrent writer's, which
    # IPAM learnt by reading the Node back after its guarded write failed.
    names = ("node-a", "node-b", "node-late", "node-stopped")
    cidrs = {}
    for name in names:
        node = outcome.node(name)
        assert node is not None
        cidrs[name] = node["spec"]["podCIDRs"]
    assert cidrs[RACED_NODE] == [RACED_CIDR]
    assert len({c[0] for c in cidrs.values()}) == len(names)
    raced = f"/api/v1/nodes/{RACED_NODE}"
    assert ("PATCH", 422) in [(a.method, a.status) for a in outcome.answers if a.path == raced]
    assert ("GET", 200) in [(a.method, a.status) for a in outcome.answers if a.path == raced]
    # node-route-controller: a route per pod CIDR, and NetworkUnavailable=False written.
    routes = {(r.target_node, r.destination_cidr) for r in outcome.cloud.routes()}
    assert routes == {(name, cidrs[name][0]) for name in names}
    for name in names:
        node = outcome.node(name)
        assert node is not None
        conditions = {c["type"]: c for c in node["status"]["conditions"]}
        assert conditions["NetworkUnavailable"]["status"] == "False"
    # service-lb-controller: finalizer and ingress written through services/status, the
    # new Node pushed to the load balancer, then the Service deleted (finalizer removed).
    ensured = outcome.service_ensured
    assert ensured is not None
    assert ensured["metadata"]["finalizers"] == [FINALIZER]
    assert ensured["status"]["loadBalancer"]["ingress"]
    assert "node-late" in outcome.backends_ensured
    assert "node-gone" not in outcome.backends_ensured
    service_type = outcome.api.type_for("v1", "Service")
    assert outcome.api.store.lookup(service_type, "default", "web") is None
    assert outcome.cloud.load_balancers() == []
    # Events: created, and a repeat written as a patch of the first one (count 2+).
    events = outcome.events()
    reasons = {e["reason"] for e in events}
    assert {
        "Synced",
        "DeletingNode",
        "EnsuringLoadBalancer",
        "EnsuredLoadBalancer",
        "UpdatedLoadBalancer",
        "DeletedLoadBalancer",
        "LeaderElection",
    } <= reasons
    assert max(e["count"] for e in events) >= 2
    # The Lease: created by ccm-a, renewed, watched by the standby, now released by ccm-b.
    lease = outcome.api.get("coordination.k8s.io/v1", "Lease", SA_NAME, "kube-system")
    assert lease["spec"]["leaseTransitions"] >= 1
    lease_calls = [
        (a.replica, a.verb, a.status) for a in outcome.answers if a.path.startswith(LEASES)
    ]
    assert ("ccm-a", "create", 201) in lease_calls
    assert lease_calls.count(("ccm-a", "update", 200)) >= 5
    assert ("ccm-b", "watch", 200) in lease_calls
    # Least privilege, from the other side: every permission granted was used.
    granted = set().union(*(g.permissions() for g in GRANTS))
    assert outcome.allowed() == granted


@pytest.mark.parametrize("grant", GRANT_PARAMS)
async def test_every_rule_is_needed(grant: Grant, autojump_clock: trio.testing.MockClock) -> None:
    """Without this rule some path is refused (403) for its permissions, and only for
    them, and trio-ccm's log says for each what to grant to whom."""
    with trio.fail_after(300):
        outcome = await run_scenario(without(MANIFEST, grant))
    denied = outcome.denied()
    assert denied, f"nothing was refused without {grant.id}: the rule is not needed"
    assert denied <= grant.permissions()
    for verb, _group, resource in sorted(denied):
        assert outcome.reports(verb, resource), f"no log line reports {verb} {resource}"
    assert any(
        {e["log_level"] for e in outcome.reports(v, r)} & VISIBLE_LEVELS for v, _, r in denied
    ), "no refusal is reported at a level shown by default"


@pytest.mark.parametrize(("grant", "verb"), VERB_PARAMS)
async def test_every_verb_is_needed(
    grant: Grant, verb: str, autojump_clock: trio.testing.MockClock
) -> None:
    """Without just this verb of the rule some path is refused (403) for it, and only for
    it, and trio-ccm's log names the verb, the resource, the account and the fix, at a
    level shown by default."""
    with trio.fail_after(300):
        outcome = await run_scenario(without(MANIFEST, grant, verb))
    assert outcome.denied() == grant.permissions([verb])
    for permission in sorted(outcome.denied()):
        outcome.check_reported(permission)
