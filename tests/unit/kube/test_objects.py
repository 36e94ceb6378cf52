"""The cached Structs: what they keep, what they drop, and their keys."""

from __future__ import annotations

import copy
from collections.abc import Mapping

import msgspec

from tests.helpers.wire import NODE
from trio_ccm.kube.objects import (
    LEASES,
    NODES,
    SERVICES,
    Node,
    NodeLabels,
    Service,
    share_unchanged,
)


def _decode(body: object) -> Node:
    return msgspec.json.decode(msgspec.json.encode(body), type=Node)


def test_node_keeps_what_the_ccm_reads() -> None:
    """A cached Node keeps its identity, labels, spec, addresses and the conditions read."""
    node = _decode(NODE)
    assert node.key == "node-1"
    assert node.metadata.labels["topology.kubernetes.io/zone"] == "a"
    assert node.spec.provider_id == "sim://node-1"
    assert node.spec.pod_cidrs == ("10.244.1.0/24",)
    assert [(a.type, a.address) for a in node.status.addresses] == [
        ("Hostname", "node-1"),
        ("InternalIP", "10.0.0.1"),
    ]
    ready = node.status.condition("Ready")
    assert ready is not None
    assert (ready.status, ready.reason) == ("True", "KubeletReady")


def test_node_drops_what_the_ccm_does_not_read() -> None:
    """Other conditions, condition messages and unread annotations are not cached."""
    node = _decode(NODE)
    assert [c.type for c in node.status.conditions] == ["Ready"]
    assert node.status.condition("MemoryPressure") is None
    assert node.metadata.annotations == {"alpha.kubernetes.io/provided-node-ip": "10.0.0.1"}


def test_repeated_node_strings_are_shared() -> None:
    """The hostname, label values and podCIDR are one string object across fields."""
    node = _decode(NODE)
    hostname_address = node.status.addresses[0].address
    assert node.metadata.name is hostname_address
    assert node.metadata.labels["kubernetes.io/hostname"] is hostname_address
    assert node.spec.pod_cidr is node.spec.pod_cidrs[0]
    assert _decode(NODE).status.conditions[0].reason is node.status.conditions[0].reason


def test_service_keeps_annotations_and_ports() -> None:
    """Services keep every annotation (providers read their own) and their ports."""
    body = {
        "metadata": {
            "name": "web",
            "namespace": "default",
            "annotations": {"example.com/lb-type": "nlb"},
        },
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "nodePort": 30080}]},
    }
    service = msgspec.json.decode(msgspec.json.encode(body), type=Service)
    assert service.key == "default/web"
    assert service.metadata.annotations == {"example.com/lb-type": "nlb"}
    assert service.spec.ports[0].node_port == 30080


def test_resource_paths() -> None:
    """Resources build the API paths for collections, objects and subresources."""
    assert NODES.path() == "/api/v1/nodes"
    assert NODES.path(name="n1", subresource="status") == "/api/v1/nodes/n1/status"
    assert SERVICES.path("default", "web") == "/api/v1/namespaces/default/services/web"
    assert LEASES.path("kube-system", "ccm") == (
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ccm"
    )


def test_a_new_version_shares_what_did_not_change_with_the_old_one() -> None:
    """A heartbeat (a new resourceVersion and heartbeat time) shares every cached part with
    the previous version; a changed label gives a new labels dict but shares the rest."""
    old = _decode(NODE)
    beat = copy.deepcopy(NODE)
    beat["metadata"]["resourceVersion"] = "8"
    beat["status"]["conditions"][1]["lastHeartbeatTime"] = "y"
    new = _decode(beat)
    share_unchanged(old, new)
    assert new.metadata.resource_version == "8"
    assert new.spec is old.spec
    assert new.status is old.status
    assert new.metadata.labels is old.metadata.labels
    assert new.metadata.uid is old.metadata.uid

    relabelled = copy.deepcopy(beat)
    relabelled["metadata"]["labels"]["topology.kubernetes.io/zone"] = "b"
    newer = _decode(relabelled)
    share_unchanged(new, newer)
    assert newer.metadata.labels == {
        "kubernetes.io/hostname": "node-1",
        "topology.kubernetes.io/zone": "b",
    }
    assert newer.metadata.labels is not new.metadata.labels
    assert newer.spec is old.spec
    assert newer.status is old.status


def test_node_labels_read_like_a_dict_and_share_their_keys() -> None:
    """A cached Node's labels are a read-only Mapping equal to the dict they came from; two
    Nodes with the same label keys share one key index, and each keeps only its values."""
    one = _decode(NODE)
    other_body = copy.deepcopy(NODE)
    other_body["metadata"]["name"] = "node-2"
    other_body["metadata"]["labels"]["kubernetes.io/hostname"] = "node-2"
    two = _decode(other_body)
    labels = one.metadata.labels
    assert isinstance(labels, NodeLabels)
    assert isinstance(labels, Mapping)
    assert labels == NODE["metadata"]["labels"]
    assert NODE["metadata"]["labels"] == labels
    assert dict(labels) == NODE["metadata"]["labels"]
    assert labels["topology.kubernetes.io/zone"] == "a"
    assert labels.get("missing") is None
    assert labels.get("missing", "x") == "x"
    assert "kubernetes.io/hostname" in labels
    assert "missing" not in labels
    assert len(labels) == 2
    assert list(labels.items()) == list(NODE["metadata"]["labels"].items())
    assert repr(labels) == repr(NODE["metadata"]["labels"])
    assert isinstance(two.metadata.labels, NodeLabels)
    assert two.metadata.labels.positions is labels.positions
    assert list(labels.keys()) == list(NODE["metadata"]["labels"])
    assert list(labels.values()) == list(NODE["metadata"]["labels"].values())
    assert labels.items() == NODE["metadata"]["labels"].items()
    assert two.metadata.labels != labels
    assert one.metadata.annotations == {"alpha.kubernetes.io/provided-node-ip": "10.0.0.1"}
    assert _decode({"metadata": {"name": "bare"}}).metadata.labels == {}
