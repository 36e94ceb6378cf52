"""The simulated cloud's load balancers carry traffic: a data plane on loopback.

`DataPlane(cloud)` serves every active load balancer of `cloud` on its ingress address, which
must come from a loopback pool (`SimCloud(lb_network="127.x.y.0/24")`; the constructor refuses
any other pool, and every address it connects to is checked: traffic goes to 127.0.0.0/8
only). It follows the cloud's state (every `sync_s`), as a cloud's own data plane follows its
API (and at once when the cloud changes a load balancer):

- **listeners**: a Trio TCP proxy per TCP port and a UDP relay per UDP port, forwarding to
  the NodePort of a backend. A backend is a Node named in the load balancer (`nodes`), at
  the first internal IP of the instance with that name. The proxy connects from the
  client's own address (all of 127.0.0.0/8 is local), so the Node sees the client's address,
  as behind a load balancer that preserves it;
- **health checks** as the load balancer was configured: with a `healthCheckNodePort` (the
  Service's `externalTrafficPolicy: Local`) an HTTP `GET /healthz` there, healthy on a 200;
  otherwise a TCP connect to the first TCP port's NodePort (or, for UDP only, kube-proxy's
  own `/healthz` on port 10256). A backend turns healthy after `rise` passing checks in a row
  and unhealthy after `fall` failing ones; a new backend starts unhealthy, its first check
  at a random point of the first interval. While no backend
  is healthy the load balancer sends to all of them (fails open, as cloud load balancers do);
- **source ranges**: a client whose address is outside `sourceRanges` is refused (its TCP
  connection closed at once, its datagram dropped), and counted;
- **session affinity** `ClientIP`: a client address keeps its backend while that backend is
  a candidate (for the affinity timeout, 10,800 s); otherwise backends take turns;
- **draining**: a backend removed from the load balancer takes no new connections; the ones
  in flight finish, up to `drain_s`, and are then cut. A connection that cannot reach its
  backend (refused, timed out) is tried on the next candidate, up to three backends.

`GET /_sim/dataplane` (and `to_json()`) reports per load balancer its listeners (and why one
could not listen), its health check, and per backend its health, state, and connection
counts (active, total, failed), and the refused clients.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, NoReturn

import structlog
import trio

from trio_ccm_testbed.cloud.model import JSON, Instance, LoadBalancer, LoadBalancerPort
from trio_ccm_testbed.cloud.server import SimCloud
from trio_ccm_testbed.loopback import (
    LOOPBACK_NETWORK,
    NotLoopbackError,
    is_loopback,
    require_loopback,
)
from trio_ccm_testbed.traffic import TrafficError, http_get

__all__ = ["KUBE_PROXY_HEALTH_PORT", "DataPlane"]

log = structlog.get_logger("trio_ccm_testbed.cloud.dataplane")

KUBE_PROXY_HEALTH_PORT: Final = 10256
"""kube-proxy's own `/healthz` port (its `--healthz-bind-address` default)."""
AFFINITY_TIMEOUT_S: Final = 10800.0  # the Service's default sessionAffinityConfig timeout
_CONNECT_ATTEMPTS: Final = 3
_BIND_RETRY_S: Final = 1.0
_UDP_IDLE_S: Final = 30.0
_CHUNK: Final = 65536


@dataclass(eq=False)
class _Backend:
    """One Node behind one load balancer: its health and its connections."""

    node: str
    address: str = ""
    problem: str = ""  # why it cannot be reached at all ("" when it has an address)
    healthy: bool = False
    passes: int = 0
    fails: int = 0
    checks: int = 0
    last_check: str = ""
    draining_until: float | None = None
    active: int = 0
    total: int = 0
    failed: int = 0
    scopes: set[trio.CancelScope] = field(default_factory=set)
    checker: trio.CancelScope | None = None
    quiet: trio.Event = field(default_factory=trio.Event)  # set when a connection ends

    @property
    def state(self) -> str:
        if self.draining_until is not None:
            return "draining"
        return "healthy" if self.healthy else "unhealthy"

    def to_json(self) -> dict[str, JSON]:
        return {
            "node": self.node,
            "address": self.address,
            "state": self.state,
            "healthy": self.healthy,
            "problem": self.problem,
            "checks": self.checks,
            "lastCheck": self.last_check,
            "activeConnections": self.active,
            "totalConnections": self.total,
            "failedConnections": self.failed,
        }


@dataclass(eq=False)
class _Listener:
    port: LoadBalancerPort
    address: str
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    listening: bool = False
    error: str = ""

    def to_json(self) -> dict[str, JSON]:
        return {
            "protocol": self.port.protocol,
            "port": self.port.port,
            "nodePort": self.port.node_port,
            "address": self.address,
            "listening": self.listening,
            "error": self.error,
        }


class _Balancer:
    """The data plane of one load balancer: its listeners, backends and health checks."""

    def __init__(self, plane: DataPlane, lb: LoadBalancer) -> None:
        self.plane = plane
        self.lb = lb
        self.scope = trio.CancelScope()
        self.backends: dict[str, _Backend] = {}
        self.listeners: dict[tuple[str, str, int], _Listener] = {}
        self.affinity: dict[str, tuple[str, float]] = {}
        self.refused = 0
        self.turn = itertools.count()
        self.networks = self._networks(lb)
        self._changed = trio.Event()

    @staticmethod
    def _networks(lb: LoadBalancer) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        return tuple(ipaddress.ip_network(r) for r in lb.source_ranges or ("0.0.0.0/0",))

    def update(self, lb: LoadBalancer) -> None:
        self.lb = lb
        self.networks = self._networks(lb)
        self._changed.set()

    # -- the task ------------------------------------------------------------------------
    async def run(self) -> None:
        with self.scope:
            async with trio.open_nursery() as nursery:
                while True:
                    self._apply(nursery)
                    await self._changed.wait()
                    self._changed = trio.Event()

    def _apply(self, nursery: trio.Nursery) -> None:
        """Bring listeners and backends in line with `self.lb` (spawning what is new)."""
        wanted = {(p.protocol, self.lb.ingress_ip, p.port): p for p in self.lb.ports}
        for key, listener in list(self.listeners.items()):
            if key not in wanted:
                listener.scope.cancel()
                del self.listeners[key]
        for key, port in wanted.items():
            existing = self.listeners.get(key)
            if existing is not None:
                existing.port = port  # a new nodePort is used from the next connection on
                continue
            listener = self.listeners[key] = _Listener(port, self.lb.ingress_ip)
            serve = self._serve_tcp if port.protocol == "TCP" else self._serve_udp
            nursery.start_soon(serve, listener, name=f"lb/{self.lb.name}/{port.port}")
        now = trio.current_time()
        instances = self.plane.instances_by_name()
        for name in self.lb.nodes:
            backend = self.backends.get(name)
            if backend is None:
                backend = self.backends[name] = _Backend(name)
            backend.draining_until = None
            self.locate(backend, instances.get(name))
            if backend.checker is None:
                backend.checker = trio.CancelScope()
                nursery.start_soon(self._check_forever, backend, name=f"lb/{name}/health")
        for name, backend in list(self.backends.items()):
            if name in self.lb.nodes or backend.draining_until is not None:
                continue
            backend.draining_until = now + self.plane.drain_s
            nursery.start_soon(self._drain, backend)

    def locate(self, backend: _Backend, instance: Instance | None) -> None:
        if instance is None or not instance.internal_ips:
            backend.address, backend.problem = "", "no instance with this name"
        elif not is_loopback(instance.internal_ips[0]):
            backend.address = instance.internal_ips[0]
            backend.problem = f"internal IP {instance.internal_ips[0]} is not loopback"
        else:
            backend.address, backend.problem = instance.internal_ips[0], ""

    async def _drain(self, backend: _Backend) -> None:
        until = backend.draining_until
        assert until is not None
        with trio.move_on_at(until):
            while backend.active:
                backend.quiet = trio.Event()
                await backend.quiet.wait()
        if backend.draining_until != until:
            return  # added back meanwhile
        for scope in list(backend.scopes):
            scope.cancel()
        if backend.checker is not None:
            backend.checker.cancel()
        self.backends.pop(backend.node, None)
        log.info("lb.backend-drained", lb=self.lb.name, node=backend.node, cut=len(backend.scopes))

    # -- health --------------------------------------------------------------------------
    def health_check(self) -> tuple[str, int, str]:
        """(kind, node port, path) of this load balancer's health check."""
        if self.lb.health_check_node_port:
            return "HTTP", self.lb.health_check_node_port, "/healthz"
        for port in self.lb.ports:
            if port.protocol == "TCP" and port.node_port:
                return "TCP", port.node_port, ""
        return "HTTP", KUBE_PROXY_HEALTH_PORT, "/healthz"

    async def _check_forever(self, backend: _Backend) -> None:
        assert backend.checker is not None
        plane = self.plane
        with backend.checker:
            # The first check at a random point of the first interval, so that the checks of
            # many load balancers started together do not all fall at the same instants.
            await trio.sleep(plane.health_interval_s * plane.jitter.random())
            while True:
                passed, what = await self._check(backend)
                backend.checks += 1
                backend.last_check = what
                if passed:
                    backend.passes, backend.fails = backend.passes + 1, 0
                    if not backend.healthy and backend.passes >= plane.rise:
                        backend.healthy = True
                        log.info("lb.backend-healthy", lb=self.lb.name, node=backend.node)
                else:
                    backend.passes, backend.fails = 0, backend.fails + 1
                    if backend.healthy and backend.fails >= plane.fall:
                        backend.healthy = False
                        log.info(
                            "lb.backend-unhealthy", lb=self.lb.name, node=backend.node, why=what
                        )
                await trio.sleep(plane.health_interval_s)

    async def _check(self, backend: _Backend) -> tuple[bool, str]:
        if backend.problem:
            return False, backend.problem
        kind, port, path = self.health_check()
        with trio.move_on_after(self.plane.health_timeout_s):
            try:
                if kind == "TCP":
                    stream = await trio.open_tcp_stream(backend.address, port)
                    await stream.aclose()
                    return True, f"TCP {port}: connected"
                reply = await http_get(backend.address, port, path)
            except (OSError, TrafficError) as exc:
                return False, f"{kind} {port}: {exc}"
            return reply.status == 200, f"HTTP {port}{path}: {reply.status}"
        return False, f"{kind} {port}: no answer within {self.plane.health_timeout_s:g}s"

    # -- choosing a backend ------------------------------------------------------------------
    def admits(self, client: str) -> bool:
        address = ipaddress.ip_address(client)
        return any(address in network for network in self.networks)

    def candidates(self) -> list[_Backend]:
        usable = [
            b
            for name in self.lb.nodes
            if (b := self.backends.get(name)) is not None
            and b.draining_until is None
            and not b.problem
        ]
        healthy = [b for b in usable if b.healthy]
        return healthy or usable  # none healthy: fail open

    def choose(self, client: str, tried: set[str]) -> _Backend | None:
        candidates = [b for b in self.candidates() if b.node not in tried]
        if not candidates:
            return None
        now = trio.current_time()
        sticky = self.lb.session_affinity == "ClientIP"
        if sticky:
            held = self.affinity.get(client)
            if held is not None and held[1] > now:
                for backend in candidates:
                    if backend.node == held[0]:
                        self.affinity[client] = (backend.node, now + AFFINITY_TIMEOUT_S)
                        return backend
        backend = candidates[next(self.turn) % len(candidates)]
        if sticky:
            self.affinity[client] = (backend.node, now + AFFINITY_TIMEOUT_S)
        return backend

    @contextlib.contextmanager
    def _connection(self, backend: _Backend) -> Iterator[trio.CancelScope]:
        scope = trio.CancelScope()
        backend.active += 1
        backend.total += 1
        backend.scopes.add(scope)
        try:
            yield scope
        finally:
            backend.active -= 1
            backend.scopes.discard(scope)
            backend.quiet.set()

    # -- TCP -----------------------------------------------------------------------------
    async def _bind(self, listener: _Listener, kind: int) -> trio.socket.SocketType:
        """A socket bound to the listener's address, retrying while it cannot be bound."""
        while True:
            sock = trio.socket.socket(trio.socket.AF_INET, kind)
            try:
                sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
                await sock.bind((listener.address, listener.port.port))
            except OSError as exc:
                sock.close()
                hint = ""
                if listener.port.port < 1024:
                    hint = (
                        " (ports under 1024 need root, or sysctl "
                        "net.ipv4.ip_unprivileged_port_start=0)"
                    )
                error = (
                    f"cannot listen on {listener.address}:{listener.port.port}/"
                    f"{listener.port.protocol}: {exc.strerror or exc}{hint}"
                )
                if error != listener.error:
                    log.warning("lb.listen-failed", lb=self.lb.name, error=error)
                listener.error = error
                await trio.sleep(_BIND_RETRY_S)
                continue
            listener.error = ""
            return sock

    async def _serve_tcp(self, listener: _Listener) -> None:
        with listener.scope:
            sock = await self._bind(listener, trio.socket.SOCK_STREAM)
            sock.listen(128)
            listener.listening = True
            try:

                async def handler(stream: trio.SocketStream) -> None:
                    await self._proxy(stream, listener)

                await trio.serve_listeners(handler, [trio.SocketListener(sock)])
            finally:
                listener.listening = False

    async def _proxy(self, client: trio.SocketStream, listener: _Listener) -> None:
        async with client:
            try:
                source = client.socket.getpeername()[0]
            except OSError:
                return
            if not self.admits(source):
                self.refused += 1
                return
            tried: set[str] = set()
            while len(tried) < _CONNECT_ATTEMPTS:
                backend = self.choose(source, tried)
                if backend is None:
                    return
                tried.add(backend.node)
                upstream = await self._connect(backend, listener.port.node_port, source)
                if upstream is None:
                    continue
                with self._connection(backend) as scope, scope:
                    async with upstream:
                        await _splice(client, upstream)
                return

    async def _connect(
        self, backend: _Backend, node_port: int, source: str
    ) -> trio.SocketStream | None:
        try:
            require_loopback(backend.address, f"load balancer {self.lb.name} backend")
        except NotLoopbackError:
            backend.failed += 1
            return None
        with trio.move_on_after(self.plane.connect_timeout_s):
            try:
                return await trio.open_tcp_stream(backend.address, node_port, local_address=source)
            except OSError:
                pass
        backend.failed += 1
        return None

    # -- UDP -----------------------------------------------------------------------------
    async def _serve_udp(self, listener: _Listener) -> None:
        with listener.scope:
            sock = await self._bind(listener, trio.socket.SOCK_DGRAM)
            flows: dict[tuple[str, int], trio.socket.SocketType] = {}
            listener.listening = True
            try:
                async with trio.open_nursery() as nursery:
                    while True:
                        try:
                            data, peer = await sock.recvfrom(_CHUNK)
                        except OSError:
                            continue
                        client = (str(peer[0]), int(peer[1]))
                        if not self.admits(client[0]):
                            self.refused += 1
                            continue
                        upstream = flows.get(client)
                        if upstream is None:
                            backend = self.choose(client[0], set())
                            if backend is None:
                                continue
                            upstream = await self._open_flow(backend, listener, client)
                            if upstream is None:
                                continue
                            flows[client] = upstream
                            nursery.start_soon(
                                self._relay_back, sock, upstream, backend, client, flows
                            )
                        with contextlib.suppress(OSError):
                            await upstream.send(data)
            finally:
                listener.listening = False
                sock.close()

    async def _open_flow(
        self, backend: _Backend, listener: _Listener, client: tuple[str, int]
    ) -> trio.socket.SocketType | None:
        try:
            require_loopback(backend.address, f"load balancer {self.lb.name} backend")
        except NotLoopbackError:
            backend.failed += 1
            return None
        upstream = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        try:
            await upstream.bind((client[0], 0))
            await upstream.connect((backend.address, listener.port.node_port))
        except OSError:
            upstream.close()
            backend.failed += 1
            return None
        return upstream

    async def _relay_back(
        self,
        sock: trio.socket.SocketType,
        upstream: trio.socket.SocketType,
        backend: _Backend,
        client: tuple[str, int],
        flows: dict[tuple[str, int], trio.socket.SocketType],
    ) -> None:
        """Answers from the backend go back to the client until the flow idles out."""
        with self._connection(backend) as scope, scope, upstream:
            try:
                while True:
                    with trio.move_on_after(_UDP_IDLE_S) as idle:
                        data = await upstream.recv(_CHUNK)
                    if idle.cancelled_caught:
                        return
                    await sock.sendto(data, client)
            except OSError:
                backend.failed += 1  # the Node refused (ICMP port unreachable)
            finally:
                flows.pop(client, None)

    def to_json(self) -> dict[str, JSON]:
        kind, port, path = self.health_check()
        return {
            "name": self.lb.name,
            "service": self.lb.service,
            "ip": self.lb.ingress_ip,
            "sessionAffinity": self.lb.session_affinity,
            "sourceRanges": list(self.lb.source_ranges),
            "healthCheck": {"protocol": kind, "port": port, "path": path},
            "listeners": [listener.to_json() for listener in self.listeners.values()],
            "backends": [b.to_json() for b in sorted(self.backends.values(), key=_by_node)],
            "refusedClients": self.refused,
        }


def _by_node(backend: _Backend) -> str:
    return backend.node


async def _splice(a: trio.SocketStream, b: trio.SocketStream) -> None:
    """Copy both ways until both sides are done (half-closes passed on)."""

    async def pump(source: trio.SocketStream, sink: trio.SocketStream) -> None:
        try:
            while chunk := await source.receive_some(_CHUNK):
                await sink.send_all(chunk)
            with contextlib.suppress(OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                await sink.send_eof()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            nursery.cancel_scope.cancel()  # a reset on one side ends both

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump, a, b)
        nursery.start_soon(pump, b, a)


class DataPlane:
    """Serves the load balancers of `cloud` on their loopback addresses (module docstring)."""

    def __init__(
        self,
        cloud: SimCloud,
        *,
        health_interval_s: float = 1.0,
        health_timeout_s: float = 1.0,
        rise: int = 2,
        fall: int = 2,
        drain_s: float = 10.0,
        connect_timeout_s: float = 2.0,
        sync_s: float = 0.2,
    ) -> None:
        pool = cloud.lb_network
        if not isinstance(pool, ipaddress.IPv4Network) or not pool.subnet_of(LOOPBACK_NETWORK):
            raise NotLoopbackError(
                f"the simulated cloud's load-balancer pool {pool} is not loopback: the data "
                "plane serves (and its clients send to) 127.0.0.0/8 only; create the cloud "
                "with a loopback pool, e.g. SimCloud(lb_network='127.240.0.0/24')"
            )
        for name, value in (
            ("health_interval_s", health_interval_s),
            ("health_timeout_s", health_timeout_s),
            ("connect_timeout_s", connect_timeout_s),
            ("sync_s", sync_s),
        ):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}={value!r}: must be a positive number of seconds")
        if not (math.isfinite(drain_s) and drain_s >= 0):
            raise ValueError(f"drain_s={drain_s!r}: must be 0 or more seconds")
        if rise < 1 or fall < 1:
            raise ValueError(f"rise={rise}, fall={fall}: each must be at least 1")
        self.cloud = cloud
        self.health_interval_s = health_interval_s
        self.health_timeout_s = health_timeout_s
        self.rise = rise
        self.fall = fall
        self.drain_s = drain_s
        self.connect_timeout_s = connect_timeout_s
        self.sync_s = sync_s
        self._balancers: dict[str, _Balancer] = {}
        self._instances: dict[str, Instance] = {}
        self._wake = trio.Event()
        self.jitter = random.Random(0)  # noqa: S311 - spreading health checks, not secrets

    def changed(self) -> None:
        """The cloud changed a load balancer: sync now rather than at the next `sync_s`."""
        self._wake.set()

    def instances_by_name(self) -> Mapping[str, Instance]:
        return self._instances

    async def serve(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Serve until cancelled; `task_status.started()` after the first look at the cloud."""
        self.cloud.dataplane = self
        try:
            async with trio.open_nursery() as nursery:
                self._sync(nursery)
                task_status.started()
                while True:
                    with trio.move_on_after(self.sync_s):
                        await self._wake.wait()
                    self._wake = trio.Event()
                    self._sync(nursery)
        finally:
            self.cloud.dataplane = None

    def _sync(self, nursery: trio.Nursery) -> None:
        self._instances = {i.name: i for i in self.cloud.instances() if i.state != "terminated"}
        now = trio.current_time()
        active = {lb.name: lb for lb in self.cloud.load_balancers() if lb.ready_at <= now}
        for name, balancer in list(self._balancers.items()):
            if name not in active:
                balancer.scope.cancel()
                del self._balancers[name]
                log.info("lb.stopped", lb=name)
        for name, lb in active.items():
            found = self._balancers.get(name)
            if found is None:
                started = self._balancers[name] = _Balancer(self, lb)
                nursery.start_soon(started.run, name=f"lb/{name}")
                log.info("lb.serving", lb=name, service=lb.service, ip=lb.ingress_ip)
            elif found.lb != lb:
                found.update(lb)
            else:
                # Instances change under an unchanged load balancer (a Node re-addressed).
                for backend in found.backends.values():
                    found.locate(backend, self._instances.get(backend.node))

    def balancer(self, name: str) -> dict[str, JSON] | None:
        """One load balancer's data-plane state (as in `to_json`), or None."""
        found = self._balancers.get(name)
        return None if found is None else found.to_json()

    def to_json(self) -> dict[str, JSON]:
        return {
            "healthIntervalSeconds": self.health_interval_s,
            "rise": self.rise,
            "fall": self.fall,
            "drainSeconds": self.drain_s,
            "loadBalancers": [b.to_json() for b in self._balancers.values()],
        }
