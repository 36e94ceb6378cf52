"""The extra-controller example in docs/embedding.md works as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import trio
import trio.testing

from tests.helpers.supervisor import NoCapabilities
from trio_ccm.settings import Settings
from trio_ccm.supervisor import Serving, serve
from trio_ccm.testing.apiserver import ApiServer
from trio_ccm.testing.harness import emulator_connection

DOC = Path(__file__).parents[2] / "docs" / "embedding.md"


def example() -> dict[str, Any]:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    namespace: dict[str, Any] = {}
    exec(compile(blocks[-1], str(DOC), "exec"), namespace)  # noqa: S102 - our own doc
    return namespace


async def test_the_documented_controller_labels_nodes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The doc's name-zone controller runs under serve() and labels every Node."""
    doc = example()
    server = ApiServer(seed=1)
    for name in ("web-a", "db-b"):
        server.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            serving: Serving = await nursery.start(
                lambda task_status: serve(
                    Settings(secure_port=0),
                    NoCapabilities(),
                    controllers=[doc["NameZoneController"]],
                    connection=emulator_connection(),
                    transport=server.transport(),
                    task_status=task_status,
                )
            )
            await serving.wait_leading()
            await trio.sleep(1)
            assert serving.controllers == ["name-zone-controller"]
            nursery.cancel_scope.cancel()
    labels = {
        n: server.get("v1", "Node", n)["metadata"]["labels"][doc["ZONE_LABEL"]]
        for n in ("web-a", "db-b")
    }
    assert labels == {"web-a": "a", "db-b": "b"}
