"""Fixtures: a fresh emulator and an httpx client on its in-process transport."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from trio_ccm_testbed.apiserver import ApiServer


@pytest.fixture
def server() -> ApiServer:
    return ApiServer(seed=1)


@pytest.fixture
async def client(server: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=server.transport(), base_url="http://emulator") as c:
        yield c
