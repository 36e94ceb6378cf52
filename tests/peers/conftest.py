"""Fixtures of the peer-client tests (their plumbing is `tests/helpers/peers.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.helpers.peers import Emulator, start_emulator


@pytest.fixture
async def emulator(nursery: trio.Nursery, tmp_path: Path) -> Emulator:
    """An emulator over TLS that lives as long as the test."""
    return await start_emulator(nursery, tmp_path / "emulator")
