"""node_lifecycle.needs_look, as a table: which Nodes a monitoring pass asks the cloud
about."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from trio_ccm.actors.node_lifecycle import needs_look
from trio_ccm.kube.objects import Node
from trio_ccm.kube.wellknown import TAINT_SHUTDOWN
from trio_ccm.testing import make_node

SHUTDOWN = {"key": TAINT_SHUTDOWN, "effect": "NoSchedule"}


def node(*, ready: str = "True", taints: list[dict[str, str]] | None = None, **extra: Any) -> Node:
    body = make_node("n", ready=ready, taints=taints or [])
    if extra.get("no_conditions"):
        body["status"]["conditions"] = []
    if extra.get("deleting"):
        body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return msgspec.convert(body, Node)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(node(), False, id="ready-untainted-needs-nothing"),
        pytest.param(node(ready="False"), True, id="not-ready"),
        pytest.param(node(ready="Unknown"), True, id="ready-unknown"),
        pytest.param(node(no_conditions=True), True, id="no-ready-condition"),
        pytest.param(node(taints=[SHUTDOWN]), True, id="ready-but-shutdown-taint-to-remove"),
        pytest.param(node(ready="False", deleting=True), False, id="being-deleted"),
        pytest.param(
            node(taints=[SHUTDOWN], deleting=True), False, id="being-deleted-with-shutdown-taint"
        ),
    ],
)
def test_needs_look(obj: Node, expected: bool) -> None:
    """A Node not being deleted needs a look when it is not Ready (or has no Ready
    condition), or is Ready and still carries the shutdown taint."""
    assert needs_look(obj) is expected
