"""Fixtures of the peer-client tests (their plumbing is `tests/helpers/peers.py`)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.helpers.peers import Emulator, start_emulator


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The peer clients are other people's code: some leave a socket for the garbage
    collector to close (kubernetes_asyncio's and kr8s's asyncio transports, lightkube's TLS
    sockets in worker threads). That is no fault of the emulator, so those warnings are not
    errors here; `_collect_peer_garbage` makes them surface in the peer test itself, never
    later in an unrelated one."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.filterwarnings("ignore::ResourceWarning"))
            item.add_marker(
                pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
            )


@pytest.fixture(autouse=True)
def _collect_peer_garbage() -> Iterator[None]:
    yield
    gc.collect()


@pytest.fixture
async def emulator(nursery: trio.Nursery, tmp_path: Path) -> Emulator:
    """An emulator over TLS that lives as long as the test."""
    return await start_emulator(nursery, tmp_path / "emulator")
