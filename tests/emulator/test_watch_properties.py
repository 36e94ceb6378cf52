"""Property: with concurrent writers, every watcher sees a gap-free, strictly ordered stream.

Each hypothesis example runs its own `trio.run` under a `MockClock`: writer tasks create,
patch and delete Nodes and ConfigMaps through the in-process client while watchers, started
at different times and resourceVersions, some with label selectors, record what they see.
Replaying a watcher's events onto its starting state must give exactly the server's final
state restricted to that watcher's selector.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_ccm_testbed.apiserver import ApiServer

MERGE = {"content-type": "application/merge-patch+json"}
NAMESPACES = ("ns-a", "ns-b")
NODE_NAMES = ("n0", "n1", "n2", "n3")
CONFIGMAP_NAMES = ("c0", "c1", "c2")
COLORS = ("red", "blue", None)  # None: the object has no color label
INITIAL_EVENTS_END = "k8s.io/initial-events-end"

# Label selectors the watchers use, with an independent matcher for each.
SELECTORS: dict[str, Callable[[Mapping[str, str]], bool]] = {
    "": lambda labels: True,
    "color=red": lambda labels: labels.get("color") == "red",
    "color in (red,blue)": lambda labels: labels.get("color") in ("red", "blue"),
    "color!=red": lambda labels: labels.get("color") != "red",
    "!color": lambda labels: "color" not in labels,
}
RESOURCES = {
    "nodes": "/api/v1/nodes",
    "configmaps": "/api/v1/configmaps",
    "configmaps-ns-a": "/api/v1/namespaces/ns-a/configmaps",
}


@dataclass(frozen=True)
class Op:
    """One write: a kind, an action, a target and the color label it sets."""

    kind: str
    action: str
    name_index: int
    namespace: str
    color: str | None
    delay: float


@dataclass(frozen=True)
class WatcherSpec:
    """Where a watcher looks, how it starts and when."""

    resource: str
    selector: str
    mode: str  # "list": list then watch; "exact": Exact list at the setup RV; "initial"
    start_delay: float


ops = st.builds(
    Op,
    kind=st.sampled_from(("node", "configmap")),
    action=st.sampled_from(("create", "create", "patch", "patch", "delete")),
    name_index=st.integers(0, 2),
    namespace=st.sampled_from(NAMESPACES),
    color=st.sampled_from(COLORS),
    delay=st.sampled_from((0.0, 0.0, 0.5, 1.0, 2.0)),
)
watcher_specs = st.builds(
    WatcherSpec,
    resource=st.sampled_from(tuple(RESOURCES)),
    selector=st.sampled_from(tuple(SELECTORS)),
    mode=st.sampled_from(("list", "exact", "initial")),
    start_delay=st.sampled_from((0.0, 0.5, 1.0, 3.0, 7.0)),
)


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def _rv(obj: Mapping[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = obj["metadata"].get("labels") or {}
    return labels


async def _write(client: httpx.AsyncClient, op: Op, serial: int) -> None:
    labels = {"color": op.color} if op.color else {}
    if op.kind == "node":
        name = NODE_NAMES[op.name_index]
        collection = "/api/v1/nodes"
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
        }
        patch: dict[str, Any] = {
            "metadata": {"labels": {"color": op.color}, "annotations": {"serial": str(serial)}}
        }
    else:
        name = CONFIGMAP_NAMES[op.name_index]
        collection = f"/api/v1/namespaces/{op.namespace}/configmaps"
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels},
            "data": {"serial": str(serial)},
        }
        patch = {"metadata": {"labels": {"color": op.color}}, "data": {"serial": str(serial)}}
    if op.action == "create":
        response = await client.post(collection, json=body)
        allowed = {201, 409}
    elif op.action == "patch":
        response = await client.patch(f"{collection}/{name}", json=patch, headers=MERGE)
        allowed = {200, 404}
    else:
        response = await client.delete(f"{collection}/{name}")
        allowed = {200, 404}
    assert response.status_code in allowed, (op, response.status_code, response.text)


async def _writer(client: httpx.AsyncClient, writes: list[Op], first_serial: int) -> None:
    for offset, op in enumerate(writes):
        await trio.sleep(op.delay)
        await _write(client, op, first_serial + offset)


@dataclass
class WatcherRun:
    """A watcher's starting state and every event it received."""

    spec: WatcherSpec
    start_rv: int = 0
    initial: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    synced_rv: int = -1
    ended: bool = False

    def __post_init__(self) -> None:
        self._bookmarked = trio.Event()

    async def wait_synced(self, rv: int) -> None:
        """Wait for a bookmark at `rv` or later: every earlier event has been delivered."""
        while self.synced_rv < rv:
            await self._bookmarked.wait()

    async def run(self, client: httpx.AsyncClient, setup_rv: int) -> None:
        await trio.sleep(self.spec.start_delay)
        path = RESOURCES[self.spec.resource]
        params: dict[str, str] = {"labelSelector": self.spec.selector} if self.spec.selector else {}
        query = {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": "3600", **params}
        if self.spec.mode == "initial":
            query |= {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
        else:
            if self.spec.mode == "exact":
                params |= {"resourceVersion": str(setup_rv), "resourceVersionMatch": "Exact"}
            response = await client.get(path, params=params)
            assert response.status_code == 200, response.text
            listed = response.json()
            self.start_rv = int(listed["metadata"]["resourceVersion"])
            self.initial = {_key(item): item for item in listed["items"]}
            query["resourceVersion"] = str(self.start_rv)
        async with client.stream("GET", path, params=query) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                self.events.append(event)
                if event["type"] == "BOOKMARK":
                    self.synced_rv = _rv(event["object"])
                    self._bookmarked.set()
                    self._bookmarked = trio.Event()
        self.ended = True

    def replay(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Apply the events to the starting state, checking order and consistency."""
        matches = SELECTORS[self.spec.selector]
        state = dict(self.initial)
        in_initial = self.spec.mode == "initial"
        last_rv = self.start_rv
        for index, event in enumerate(self.events):
            kind, obj = event["type"], event["object"]
            where = f"event {index} of {self.spec}: {kind} {obj.get('metadata')}"
            assert kind in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"), where
            rv = _rv(obj)
            if kind == "BOOKMARK":
                annotations = obj["metadata"].get("annotations") or {}
                if in_initial:
                    assert annotations == {INITIAL_EVENTS_END: "true"}, where
                    assert all(rv >= _rv(o) for o in state.values()), where
                    in_initial = False
                else:
                    assert INITIAL_EVENTS_END not in annotations, where
                    assert rv >= last_rv, where
                last_rv = rv
                continue
            key = _key(obj)
            assert matches(_labels(obj)), where
            if in_initial:
                assert kind == "ADDED", where
                assert key not in state, where
                state[key] = obj
                continue
            assert rv > last_rv, f"out of order or repeated: {where} after RV {last_rv}"
            last_rv = rv
            if kind == "ADDED":
                assert key not in state, where
                state[key] = obj
            elif kind == "MODIFIED":
                assert key in state, where
                assert rv > _rv(state[key]), where
                state[key] = obj
            else:
                assert key in state, where
                del state[key]
        assert not in_initial, f"{self.spec}: no initial-events-end bookmark"
        return state


async def _scenario(writers: list[list[Op]], specs: list[WatcherSpec]) -> None:
    server = ApiServer(seed=1, bookmark_interval_s=60.0)
    transport = server.transport()
    runs = [WatcherRun(spec) for spec in specs]
    finals: dict[int, dict[tuple[str, str], dict[str, Any]]] = {}
    with trio.fail_after(3600):
        async with httpx.AsyncClient(transport=transport, base_url="http://emulator") as client:
            for namespace in NAMESPACES:
                await client.post(
                    "/api/v1/namespaces",
                    json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                )
            # Some state before anything starts, so initial lists and events are not empty.
            await _write(client, Op("node", "create", 0, "ns-a", "red", 0.0), 0)
            await _write(client, Op("node", "create", 1, "ns-a", None, 0.0), 0)
            await _write(client, Op("configmap", "create", 0, "ns-a", "blue", 0.0), 0)
            await _write(client, Op("configmap", "create", 1, "ns-b", "red", 0.0), 0)
            setup_rv = server.store.rv
            async with trio.open_nursery() as watchers:
                for run in runs:
                    watchers.start_soon(run.run, client, setup_rv)
                async with trio.open_nursery() as writing:
                    for index, writes in enumerate(writers):
                        writing.start_soon(_writer, client, writes, 1000 * (index + 1))
                final_rv = server.store.rv
                for run in runs:
                    await run.wait_synced(final_rv)
                watchers.cancel_scope.cancel()
            for run in runs:
                path = RESOURCES[run.spec.resource]
                params = {"labelSelector": run.spec.selector} if run.spec.selector else {}
                response = await client.get(path, params=params)
                finals[id(run)] = {_key(item): item for item in response.json()["items"]}
    for run in runs:
        assert not run.ended, f"{run.spec}: the watch ended early"
        assert run.replay() == finals[id(run)], run.spec


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    writers=st.lists(st.lists(ops, min_size=4, max_size=12), min_size=2, max_size=3),
    specs=st.lists(watcher_specs, min_size=2, max_size=4),
)
def test_every_watcher_sees_a_gap_free_ordered_stream(
    writers: list[list[Op]], specs: list[WatcherSpec]
) -> None:
    """Replaying each watcher's strictly ordered events onto its start gives the final state."""
    trio.run(_scenario, writers, specs, clock=trio.testing.MockClock(autojump_threshold=0))
