"""Prometheus collectors, created against a registry the caller owns (no global state).

Names follow upstream where upstream has them (client-go's `rest_client_*`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)


class ClientMetrics:
    """client-go's REST client metrics."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "method", "host"],
            registry=registry,
        )
        self.duration = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            ["verb", "host"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.rate_limiter = Histogram(
            "rest_client_rate_limiter_duration_seconds",
            "Client side rate limiter latency in seconds. Broken down by verb, and host.",
            ["verb", "host"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.retries = Counter(
            "rest_client_request_retries",
            "Number of request retries, partitioned by status code, verb, and host.",
            ["code", "verb", "host"],
            registry=registry,
        )


class LeaderMetrics:
    """client-go's leader election metrics (`name` is the Lease's name)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.master_status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
            registry=registry,
        )
        self.slowpath = Counter(
            "leader_election_slowpath",
            "Total number of slow path exercised in renewing leader leases. 'name' is the "
            "string used to identify the lease.",
            ["name"],
            registry=registry,
        )
