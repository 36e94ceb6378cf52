"""Patch builders: the exact documents controllers send."""

from __future__ import annotations

import pytest

from trio_ccm.kube import patches
from trio_ccm.kube.patches import JSON_PATCH, MERGE, STRATEGIC, Patch

UNINIT = {
    "key": "node.cloudprovider.kubernetes.io/uninitialized",
    "value": "true",
    "effect": "NoSchedule",
}


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        pytest.param(
            patches.add_finalizer((), "a/x"),
            Patch(
                JSON_PATCH,
                [
                    {"op": "test", "path": "/metadata/finalizers", "value": None},
                    {"op": "add", "path": "/metadata/finalizers", "value": ["a/x"]},
                ],
            ),
            id="add-first-finalizer",
        ),
        pytest.param(
            patches.add_finalizer(("b/y",), "a/x"),
            Patch(
                JSON_PATCH,
                [
                    {"op": "test", "path": "/metadata/finalizers", "value": ["b/y"]},
                    {"op": "replace", "path": "/metadata/finalizers", "value": ["b/y", "a/x"]},
                ],
            ),
            id="add-finalizer",
        ),
        pytest.param(
            patches.add_finalizer(("a/x",), "a/x"), Patch(JSON_PATCH, []), id="finalizer-present"
        ),
        pytest.param(
            patches.remove_finalizer(("a/x", "b/y"), "a/x"),
            Patch(
                JSON_PATCH,
                [
                    {"op": "test", "path": "/metadata/finalizers", "value": ["a/x", "b/y"]},
                    {"op": "replace", "path": "/metadata/finalizers", "value": ["b/y"]},
                ],
            ),
            id="remove-finalizer",
        ),
        pytest.param(
            patches.remove_finalizer((), "a/x"), Patch(JSON_PATCH, []), id="finalizer-absent"
        ),
        pytest.param(
            patches.remove_taint([UNINIT], UNINIT["key"]),
            Patch(
                JSON_PATCH,
                [
                    {"op": "test", "path": "/spec/taints", "value": [dict(UNINIT)]},
                    {"op": "replace", "path": "/spec/taints", "value": []},
                ],
            ),
            id="remove-taint",
        ),
        pytest.param(
            patches.add_taint(None, {"key": "k", "effect": "NoSchedule", "value": ""}),
            Patch(
                JSON_PATCH,
                [
                    {"op": "test", "path": "/spec/taints", "value": None},
                    {
                        "op": "add",
                        "path": "/spec/taints",
                        "value": [{"key": "k", "effect": "NoSchedule"}],
                    },
                ],
            ),
            id="add-first-taint",
        ),
        pytest.param(
            patches.add_taint([UNINIT], UNINIT), Patch(JSON_PATCH, []), id="taint-present"
        ),
        pytest.param(
            patches.set_labels({"a": "1", "b": None}),
            Patch(MERGE, {"metadata": {"labels": {"a": "1", "b": None}}}),
            id="labels",
        ),
        pytest.param(
            patches.set_condition({"type": "NetworkUnavailable", "status": "False"}),
            Patch(
                STRATEGIC,
                {"status": {"conditions": [{"type": "NetworkUnavailable", "status": "False"}]}},
            ),
            id="condition",
        ),
        pytest.param(
            patches.set_node_addresses(
                [
                    {"type": "InternalIP", "address": "10.0.0.1"},
                    {"type": "InternalIP", "address": "10.0.0.2"},
                ]
            ),
            Patch(
                MERGE,
                {
                    "status": {
                        "addresses": [
                            {"type": "InternalIP", "address": "10.0.0.1"},
                            {"type": "InternalIP", "address": "10.0.0.2"},
                        ]
                    }
                },
            ),
            id="addresses-replaced-whole",
        ),
        pytest.param(
            patches.set_load_balancer_status([{"ip": "192.0.2.1", "ipMode": "VIP"}]),
            Patch(
                MERGE,
                {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP"}]}}},
            ),
            id="lb-status",
        ),
        pytest.param(
            patches.set_load_balancer_status([]),
            Patch(MERGE, {"status": {"loadBalancer": {"ingress": None}}}),
            id="lb-status-cleared",
        ),
    ],
)
def test_patch_documents(patch: Patch, expected: Patch) -> None:
    """Each builder produces upstream-compatible patch documents."""
    assert patch == expected


def test_empty_patches_are_flagged() -> None:
    """A builder with nothing to change says so, so callers can skip the write."""
    assert patches.add_finalizer(("a/x",), "a/x").empty
    assert not patches.add_finalizer((), "a/x").empty
