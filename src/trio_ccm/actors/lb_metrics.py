"""service-lb-controller's metrics: upstream's names and buckets (so dashboards keep
working), the leak sweep's, and the node-sync latency (one push of a new node set to every
load balancer, from the push to the last load balancer done)."""

from __future__ import annotations

from typing import Final

import prometheus_client
import trio

__all__ = ["NodeSyncLatency", "ServiceMetrics"]

_LATENCY_BUCKETS: Final = tuple(2.0**k for k in range(15))  # 1 s .. 16384 s, as upstream


class ServiceMetrics:
    """Upstream's service controller metrics (created once per registry)."""

    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        self.sync_total = prometheus_client.Counter(
            "service_controller_loadbalancer_sync",
            "A metric counting the amount of times any load balancer has been configured, as "
            "an effect of service/node changes on the cluster",
            registry=registry,
        )
        self.nodesync_errors = prometheus_client.Counter(
            "service_controller_nodesync_error",
            "A metric counting the amount of times any load balancer has been configured and "
            "errored, as an effect of node changes on the cluster",
            registry=registry,
        )
        self.nodesync_latency = prometheus_client.Histogram(
            "service_controller_nodesync_latency_seconds",
            "A metric measuring the latency for nodesync which updates loadbalancer hosts on "
            "cluster node updates.",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.update_latency = prometheus_client.Histogram(
            "service_controller_update_loadbalancer_host_latency_seconds",
            "A metric measuring the latency for updating each load balancer hosts.",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.leaked = prometheus_client.Gauge(
            "service_controller_leaked_load_balancers",
            "Load balancers the provider made for this cluster whose Service is gone, was "
            "recreated or no longer wants one, at the last sweep.",
            registry=registry,
        )
        self.leaks_deleted = prometheus_client.Counter(
            "service_controller_leaked_load_balancers_deleted",
            "Leaked load balancers deleted by the sweep (--delete-leaked-load-balancers).",
            registry=registry,
        )


class NodeSyncLatency:
    """The node-sync pass in flight: the Services still to be updated, since when; `wait()`
    returns once none is left (the node tracker starts no pass before)."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self.metrics = metrics
        self.started = 0.0
        self.pending: set[str] = set()
        self.finished = trio.Event()
        self.finished.set()

    def start(self, keys: set[str]) -> NodeSyncLatency:
        """A new node set is pushed to `keys` (a pass still in flight is abandoned)."""
        self.started = trio.current_time()
        self.pending = keys
        if keys:
            self.finished = trio.Event()
        else:
            self.finished.set()
        return self

    async def wait(self) -> None:
        """Until the pass started last is done."""
        await self.finished.wait()

    def done(self, key: str, *, failed: bool = False) -> None:
        """`key` has its new node set (or failed to); the last one observes the latency."""
        if key not in self.pending:
            return
        self.pending.discard(key)
        if failed:
            self.metrics.nodesync_errors.inc()
        if not self.pending:
            self.metrics.nodesync_latency.observe(trio.current_time() - self.started)
            self.finished.set()
