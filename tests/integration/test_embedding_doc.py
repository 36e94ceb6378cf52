"""The extra-controller example in docs/embedding.md works as written, on public names."""

from __future__ import annotations

from typing import Any

import httpx
import trio
import trio.testing

from tests.helpers.docs import blocks, private_imports
from tests.helpers.supervisor import NoCapabilities
from trio_ccm.testing import ApiServer, register_node, run_ccm

DOC = "embedding.md"


def example() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(blocks(DOC)[-1], DOC, "exec"), namespace)  # noqa: S102 - our own doc
    return namespace


def test_the_documented_controller_imports_public_names_only() -> None:
    """Every trio_ccm name the doc's example imports is in a public module's __all__."""
    assert private_imports(blocks(DOC)[-1]) == []


async def test_the_documented_controller_labels_nodes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The doc's name-zone controller runs under serve() and labels every Node, with one
    Normal Event each."""
    doc = example()
    api = ApiServer(seed=1)
    for name in ("web-a", "db-b"):
        register_node(api, name)
    with trio.fail_after(30):
        async with run_ccm(
            api, NoCapabilities(), controllers=[doc["NameZoneController"]]
        ) as serving:
            assert serving.controllers == ["name-zone-controller"]
            await trio.sleep(1)
    labels = {
        n: api.get("v1", "Node", n)["metadata"]["labels"][doc["ZONE_LABEL"]]
        for n in ("web-a", "db-b")
    }
    assert labels == {"web-a": "a", "db-b": "b"}
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://api") as http:
        events = (await http.get("/api/v1/namespaces/default/events")).json()["items"]
    assert sorted(
        (e["involvedObject"]["name"], e["type"], e["reason"], e["source"]["component"])
        for e in events
    ) == [
        ("db-b", "Normal", "ZoneLabelled", "name-zone-controller"),
        ("web-a", "Normal", "ZoneLabelled", "name-zone-controller"),
    ]
