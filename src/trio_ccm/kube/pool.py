"""The kube clients' HTTP/1.1 connection pool: httpcore's, with a cheaper request assignment.

httpcore's pool (1.0.x) re-plans every connection on each request's start and end: it asks
every idle connection whether the server closed it (a `poll` of its socket each), counts
all connections where it means the idle ones (so with more than `max_keepalive_connections`
connections open, every idle one is closed and the next request connects again), and for
each queued request lists the available connections anew (the same idle one can be handed
to two requests, one of which then goes round again). With a few dozen writes in flight
(a Node wave at a raised `--concurrent-node-syncs`) that was 8 % of the CCM's CPU
(docs/benchmarks.md, the 100,000-Node wave).

`LeanPool.assign` keeps httpcore's rules and does one pass (none when a request came back,
none waits and no idle connection can be surplus):

- a closed connection is dropped; an idle connection is handed out only after its own
  expiry check (its keep-alive time, and whether the server closed it: one `poll`, of the
  connection about to be used, not of every idle one);
- a queued request takes an idle connection of its origin (each at most once a pass), else
  a new connection while there are fewer than `max_connections`, else one idle connection
  of another origin is closed to make room, else it waits (as in httpcore);
- idle connections above `max_keepalive_connections` (counted as idle ones) are closed.

Only HTTP/1.1 (a connection carries one request at a time): the kube clients ask for no
HTTP/2. Everything else (connecting, TLS, the fence's network backend, the requests'
life cycle) is httpcore's own.
"""

from __future__ import annotations

from typing import Any

import httpcore
import httpx

__all__ = ["LeanPool", "lean_transport"]


class LeanPool(httpcore.AsyncConnectionPool):
    """httpcore's connection pool with the one-pass assignment of the module docstring."""

    def _assign_requests_to_connections(self) -> list[Any]:
        return self.assign()

    def assign(self) -> list[Any]:
        """Assign queued requests to connections; the connections to close (httpcore's
        `_assign_requests_to_connections` contract)."""
        queued = [r for r in self._requests if r.connection is None]
        if not queued and len(self._connections) <= self._max_keepalive_connections:
            # A request came back and none waits: nothing to assign, and no surplus of idle
            # connections is possible (a closed one is dropped by the next pass that
            # assigns).
            return []
        closing: list[Any] = []
        kept: list[Any] = []
        idle: list[Any] = []
        # Handed to a request that has not started on it yet: idle, but not free.
        promised = {id(r.connection) for r in self._requests if r.connection is not None}
        for connection in self._connections:
            if connection.is_closed():
                continue
            kept.append(connection)
            if connection.is_idle() and id(connection) not in promised:
                idle.append(connection)
        taken: set[int] = set()
        for pool_request in queued:
            origin = pool_request.request.url.origin
            chosen = None
            for connection in idle:
                if id(connection) in taken or not connection.can_handle_request(origin):
                    continue
                taken.add(id(connection))
                if connection.has_expired():  # its keep-alive ran out, or the server closed it
                    closing.append(connection)
                    continue
                chosen = connection
                break
            if chosen is None:
                open_count = len(kept) - len(closing)
                if open_count >= self._max_connections:
                    spare = next((c for c in idle if id(c) not in taken), None)
                    if spare is None:
                        continue  # it waits for a connection to come back, as in httpcore
                    taken.add(id(spare))
                    closing.append(spare)
                chosen = self.create_connection(origin)
                kept.append(chosen)
                taken.add(id(chosen))
            pool_request.assign_to_connection(chosen)
        spare_idle = [c for c in idle if id(c) not in taken]
        surplus = len(spare_idle) - self._max_keepalive_connections
        if surplus > 0:
            closing.extend(spare_idle[:surplus])  # the oldest first, as httpcore
        if closing:
            gone = {id(c) for c in closing}
            kept = [c for c in kept if id(c) not in gone]
        self._connections = kept
        return closing

    async def _close_connections(self, closing: list[Any]) -> None:
        # httpcore enters a shielded cancel scope first, also when there is nothing to close
        # (after every request).
        if closing:
            await super()._close_connections(closing)


def lean_transport(**kwargs: Any) -> httpx.AsyncHTTPTransport:
    """`httpx.AsyncHTTPTransport(**kwargs)` (HTTP/1.1 only) whose pool is a `LeanPool`.

    httpx builds its pool itself and offers no way to give it another; `LeanPool` adds no
    state to httpcore's, so the pool httpx built becomes one. A new httpx or httpcore whose
    pool is something else raises TypeError here, at start, rather than running with a pool
    this module does not know."""
    if kwargs.get("http2"):
        raise ValueError("lean_transport: HTTP/1.1 only (a connection holds one request)")
    transport = httpx.AsyncHTTPTransport(**kwargs)
    pool = getattr(transport, "_pool", None)
    if type(pool) is not httpcore.AsyncConnectionPool or not hasattr(pool, "_requests"):
        raise TypeError(
            f"httpx {httpx.__version__} / httpcore {httpcore.__version__}: the transport's "
            "pool is not httpcore's AsyncConnectionPool; pin httpx<0.29 or update "
            "trio_ccm.kube.pool"
        )
    pool.__class__ = LeanPool
    return transport
