"""New versions compared before they are built: the result of a full decode, sharing kept."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from tests.helpers.wire import NODE
from trio_ccm.kube.objects import Node, Service, node_labels, node_labels_against
from trio_ccm.kube.versions import FullVersions, NodeVersions, same_but_version

Change = Callable[[dict[str, Any]], None]


def _full(body: dict[str, Any]) -> Node:
    return msgspec.json.decode(msgspec.json.encode(body), type=Node)


def _built(versions: NodeVersions, body: dict[str, Any], before: Node | None, memo: Any) -> Any:
    wire = msgspec.json.decode(msgspec.json.encode(body), type=versions.wire)
    return versions.build(wire, before, memo)


def _set(*path: str, value: Any) -> Change:
    *parents, leaf = path

    def change(body: dict[str, Any]) -> None:
        at: Any = body
        for part in parents:
            at = at[int(part)] if isinstance(at, list) else at[part]
        if isinstance(at, list):
            at[int(leaf)] = value
        else:
            at[leaf] = value

    return change


def _swap_labels(body: dict[str, Any]) -> None:
    body["metadata"]["labels"] = dict(reversed(body["metadata"]["labels"].items()))


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(NODE, id="full"),
        pytest.param({"metadata": {"name": "n", "resourceVersion": "1"}}, id="bare"),
        pytest.param(
            {**NODE, "metadata": {**NODE["metadata"], "labels": {}, "annotations": {}}},
            id="no-labels",
        ),
        pytest.param(
            {
                **NODE,
                "metadata": {
                    **NODE["metadata"],
                    "deletionTimestamp": "2026-11-27T00:00:00Z",
                    "finalizers": ["a/b"],
                },
                "spec": {**NODE["spec"], "taints": [{"key": "k", "effect": "NoSchedule"}]},
            },
            id="deleting-tainted",
        ),
    ],
)
def test_a_node_built_from_its_parts_equals_a_full_decode(body: dict[str, Any]) -> None:
    """Built with no cached version, a Node equals the full decode of the same JSON and
    counts as changed."""
    node, memo, changed = _built(NodeVersions(), body, None, None)
    assert node == _full(body)
    assert memo is not None
    assert changed


@pytest.mark.parametrize(
    ("change", "changed", "kept"),
    [
        pytest.param(
            _set("status", "conditions", "1", "lastHeartbeatTime", value="y"),
            False,
            {"labels", "annotations", "spec", "status"},
            id="heartbeat",
        ),
        pytest.param(
            _set("metadata", "labels", "topology.kubernetes.io/zone", value="b"),
            True,
            {"annotations", "spec", "status"},
            id="label-value",
        ),
        pytest.param(_swap_labels, False, {"labels", "spec", "status"}, id="labels-reordered"),
        pytest.param(
            _set("metadata", "annotations", "node.alpha.kubernetes.io/ttl", value="30"),
            False,
            {"labels", "annotations", "spec", "status"},
            id="annotation-not-kept",
        ),
        pytest.param(
            _set(
                "metadata", "annotations", "alpha.kubernetes.io/provided-node-ip", value="10.0.0.2"
            ),
            True,
            {"labels", "spec", "status"},
            id="provided-node-ip",
        ),
        pytest.param(
            _set("spec", "taints", value=[{"key": "k", "effect": "NoSchedule"}]),
            True,
            {"labels", "annotations", "status"},
            id="taint-added",
        ),
        pytest.param(
            _set("status", "addresses", "1", value={"type": "InternalIP", "address": "10.0.0.9"}),
            True,
            {"labels", "annotations", "spec", "conditions"},
            id="address",
        ),
        pytest.param(
            _set("status", "conditions", "1", "status", value="False"),
            True,
            {"labels", "annotations", "spec", "addresses"},
            id="ready-false",
        ),
        pytest.param(
            _set("status", "conditions", "0", "status", value="True"),
            False,
            {"labels", "annotations", "spec", "status"},
            id="condition-not-kept",
        ),
        pytest.param(
            _set("metadata", "deletionTimestamp", value="2026-11-27T00:00:00Z"),
            True,
            {"labels", "annotations", "spec", "status"},
            id="deleting",
        ),
        pytest.param(
            _set("metadata", "finalizers", value=["a/b"]),
            True,
            {"labels", "annotations", "spec", "status"},
            id="finalizer",
        ),
    ],
)
def test_a_new_version_is_compared_before_it_is_built(
    change: Change, changed: bool, kept: set[str]
) -> None:
    """A new version built against the cached one equals its full decode, is a change
    exactly when a full decode differs in more than the resourceVersion, and holds the
    cached version's own objects for every part that did not change."""
    versions = NodeVersions()
    before, memo, _ = _built(versions, NODE, None, None)
    body = copy.deepcopy(NODE)
    body["metadata"]["resourceVersion"] = "8"
    change(body)
    node, _, differs = _built(versions, body, before, memo)
    assert node == _full(body)
    assert node.metadata.resource_version == "8"
    assert differs is changed is not same_but_version(_full(NODE), _full(body))
    parts = {
        "labels": (node.metadata.labels, before.metadata.labels),
        "annotations": (node.metadata.annotations, before.metadata.annotations),
        "spec": (node.spec, before.spec),
        "status": (node.status, before.status),
        "addresses": (node.status.addresses, before.status.addresses),
        "conditions": (node.status.conditions, before.status.conditions),
    }
    assert {name for name, (new, old) in parts.items() if new is old} >= kept
    assert node.metadata.uid is before.metadata.uid


def test_a_chain_of_versions_compares_with_the_latest() -> None:
    """Each build is compared with the version before it: a label changed and changed back
    is two changes, and a heartbeat after them none."""
    versions = NodeVersions()
    node, memo, _ = _built(versions, NODE, None, None)
    outcomes = []
    for zone in ("b", "a", "a"):
        body = copy.deepcopy(NODE)
        body["metadata"]["labels"]["topology.kubernetes.io/zone"] = zone
        node, memo, changed = _built(versions, body, node, memo)
        outcomes.append(changed)
        assert node == _full(body)
    assert outcomes == [True, True, False]


def test_other_kinds_are_decoded_whole_and_shared() -> None:
    """A Service's new version is decoded whole, shares its unchanged parts and is a change
    only when more than its resourceVersion differs."""
    versions = FullVersions(Service)
    body = {"metadata": {"name": "web", "namespace": "d", "resourceVersion": "1"}}
    decode = msgspec.json.Decoder(versions.wire).decode
    first, memo, changed = versions.build(decode(msgspec.json.encode(body)), None, None)
    assert (memo, changed) == (None, True)
    body["metadata"]["resourceVersion"] = "2"
    second, _, changed = versions.build(decode(msgspec.json.encode(body)), first, None)
    assert not changed
    assert second.spec is first.spec
    body["spec"] = {"type": "LoadBalancer"}
    _, _, changed = versions.build(decode(msgspec.json.encode(body)), second, None)
    assert changed


_LABELS_BEFORE = {"kubernetes.io/hostname": "n1", "zone": "a", "pool": "p1", "role": ""}


@pytest.mark.parametrize(
    ("after", "same_keys"),
    [
        pytest.param(dict(_LABELS_BEFORE), True, id="equal"),
        pytest.param({**_LABELS_BEFORE, "zone": "b"}, True, id="one-value"),
        pytest.param({**_LABELS_BEFORE, "zone": "b", "role": "x"}, True, id="two-values"),
        pytest.param({**_LABELS_BEFORE, "pool": "n1"}, True, id="value-becomes-the-name"),
        pytest.param({**_LABELS_BEFORE, "new": "v"}, False, id="label-added"),
        pytest.param({k: v for k, v in _LABELS_BEFORE.items() if k != "pool"}, False, id="removed"),
        pytest.param(dict(reversed(_LABELS_BEFORE.items())), False, id="reordered"),
        pytest.param({}, False, id="all-removed"),
    ],
)
def test_labels_built_against_the_cached_ones_equal_a_fresh_build(
    after: dict[str, str], same_keys: bool
) -> None:
    """Labels built against the cached ones equal a fresh build; equal labels (in any
    order) are the cached object; with the keys as before they keep the cached key
    positions and every unchanged value's own string, and a changed value is interned
    (or is the Node's name)."""
    name = "n1"
    was = node_labels(dict(_LABELS_BEFORE), name)
    # Decoded afresh, as a new version's labels are: equal strings, other objects.
    decoded = msgspec.json.decode(msgspec.json.encode(after), type=dict[str, str])
    got = node_labels_against(decoded, name, was)
    fresh = node_labels(decoded, name)
    assert got == fresh
    assert dict(got.items()) == after
    if after == _LABELS_BEFORE:  # in any order: the cached labels, as a full decode's share
        assert got is was
        return
    assert list(got) == list(after)
    if not same_keys:
        return
    assert got.positions is was.positions
    for key, value in got.items():
        if _LABELS_BEFORE[key] == value:
            assert value is was[key]
        elif value == name:
            assert value is name
        else:
            assert value is sys.intern(value)


def test_a_label_only_change_reuses_the_cached_parts() -> None:
    """A version that changes one label value (and heartbeats) is built with the cached
    spec, status, annotations and unchanged label strings, and equals its full decode."""
    versions = NodeVersions()
    before, memo, _ = _built(versions, NODE, None, None)
    body = copy.deepcopy(NODE)
    body["metadata"]["resourceVersion"] = "9"
    body["metadata"]["labels"]["topology.kubernetes.io/zone"] = "zone-b"
    for condition in body["status"]["conditions"]:
        condition["lastHeartbeatTime"] = "2026-11-27T18:00:00Z"
    node, _, differs = _built(versions, body, before, memo)
    assert differs
    assert node == _full(body)
    assert node.spec is before.spec
    assert node.status is before.status
    assert node.metadata.annotations is before.metadata.annotations
    labels, cached = node.metadata.labels, before.metadata.labels
    assert labels.positions is cached.positions
    assert [k for k in labels if labels[k] is not cached[k]] == ["topology.kubernetes.io/zone"]
