"""Small builders for the emulator's own tests: content types, paths, a Node, a Service."""

from __future__ import annotations

from typing import Any

MERGE = {"content-type": "application/merge-patch+json"}
JSON_PATCH = {"content-type": "application/json-patch+json"}
STRATEGIC = {"content-type": "application/strategic-merge-patch+json"}

NODES = "/api/v1/nodes"
SERVICES = "/api/v1/namespaces/default/services"


def node(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": spec}


def service(name: str, *ports: int, type_: str = "ClusterIP", **spec: Any) -> dict[str, Any]:
    listed = (
        [{"name": f"p{p}", "port": p} for p in ports]
        if len(ports) > 1
        else [{"port": p} for p in ports]
    )
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"type": type_, "ports": listed, **spec},
    }
