"""Fixtures: an emulator and a KubeClient reaching it through the in-process transport."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.metrics import ClientMetrics
from trio_ccm.testing.harness import emulator_connection
from trio_ccm_testbed.apiserver import ApiServer


@pytest.fixture
def server() -> ApiServer:
    return ApiServer(seed=1)


@pytest.fixture
def metrics() -> ClientMetrics:
    return ClientMetrics(CollectorRegistry())


@pytest.fixture
async def kube(server: ApiServer, metrics: ClientMetrics) -> AsyncIterator[KubeClient]:
    async with open_kube_client(
        emulator_connection(),
        transport=server.transport(),
        metrics=metrics,
        qps=0,
        component="test",
    ) as client:
        yield client
