"""Fixtures: an emulator and a KubeClient reaching it through the in-process transport."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from tests.helpers.kube import config_for
from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.metrics import ClientMetrics
from trio_ccm.testing.apiserver import ApiServer


@pytest.fixture
def server() -> ApiServer:
    return ApiServer(seed=1)


@pytest.fixture
def metrics() -> ClientMetrics:
    return ClientMetrics(CollectorRegistry())


@pytest.fixture
async def kube(server: ApiServer, metrics: ClientMetrics) -> AsyncIterator[KubeClient]:
    async with open_kube_client(
        config_for(server),
        transport=server.transport(),
        metrics=metrics,
        qps=0,
        component="test",
    ) as client:
        yield client
