"""The testbed's kube-proxy and pods: every simulated Node serves the Services' NodePorts.

`KubeProxy(kube, cloud)` plays, on each running instance of the simulated cloud whose
first internal IP is loopback (`SimCloud(internal_network="127.x.y.0/24")`), what kube-proxy
and the pods do for a load balancer's traffic:

- **pods**: every Service with node ports (types NodePort and LoadBalancer) has simulated
  pods, `<service>-<n>`: as many as its annotation `sim.trio-ccm.dev/replicas` says, else
  `replicas`. A pod is placed on a running Node (the one with the fewest pods, then by
  name) and stays there until its Node stops or goes, when it is placed again at once (a
  real cluster evicts it after minutes); `move_pod` moves one, as a rescheduling would. A
  pod answers an HTTP request with one JSON line: its name, its Node, the source address it
  saw and its Service (`trio_ccm_testbed.traffic.Answer`); a UDP datagram likewise;
- **NodePorts**: each such Node listens on its own address on every Service's TCP and UDP
  node ports. `externalTrafficPolicy: Cluster` forwards to any pod of the Service; a pod on
  another Node then sees this Node's address (kube-proxy's SNAT). `Local` forwards only to
  pods on this Node, which see the client's address, and refuses the connection when there
  are none. `sessionAffinity: ClientIP` keeps a client address on one pod;
- **health**: `healthCheckNodePort` (Local) answers `GET /healthz` with 200 and the count of
  local endpoints, or 503 when there are none; kube-proxy's own `/healthz` on port 10256
  answers 200;
- a Node whose instance is stopped (or terminated) closes everything: it stops answering.

The Services are read from the API every `poll_s`; the Nodes from the cloud's instances.
Every address served or answered is loopback (`trio_ccm_testbed.loopback`).
"""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, NoReturn

import msgspec
import structlog
import trio

from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.errors import KubeError
from trio_ccm.kube.objects import SERVICES, Service
from trio_ccm_testbed.cloud import SimCloud
from trio_ccm_testbed.cloud.dataplane import KUBE_PROXY_HEALTH_PORT
from trio_ccm_testbed.loopback import is_loopback
from trio_ccm_testbed.traffic import Answer

__all__ = ["REPLICAS_ANNOTATION", "KubeProxy", "Pod"]

log = structlog.get_logger("trio_ccm_testbed.kubeproxy")

REPLICAS_ANNOTATION: Final = "sim.trio-ccm.dev/replicas"
"""A Service annotation: how many simulated pods it has (default: `KubeProxy(replicas=)`)."""
_MAX_HEAD: Final = 16 * 1024
_BIND_RETRY_S: Final = 1.0


@dataclass(frozen=True)
class Pod:
    """A simulated pod of a Service, placed on a Node."""

    service: str
    """"namespace/name" of its Service."""
    name: str
    node: str


@dataclass(frozen=True)
class _Port:
    protocol: str
    node_port: int


@dataclass
class _Served:
    """What a Node serves for one Service (recomputed every poll)."""

    key: str
    local: bool
    sticky: bool
    health_port: int


@dataclass(eq=False)
class _Agent:
    """The kube-proxy of one Node: its listeners, each under its own cancel scope."""

    node: str
    address: str
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    listeners: dict[tuple[str, int], trio.CancelScope] = field(default_factory=dict)
    errors: dict[tuple[str, int], str] = field(default_factory=dict)
    changed: trio.Event = field(default_factory=trio.Event)


class KubeProxy:
    """kube-proxy and the pods on every Node of the simulated cloud (module docstring)."""

    def __init__(
        self,
        kube: KubeClient,
        cloud: SimCloud,
        *,
        replicas: int = 2,
        poll_s: float = 0.2,
    ) -> None:
        if replicas < 0:
            raise ValueError(f"replicas={replicas}: must be 0 or more")
        self.kube = kube
        self.cloud = cloud
        self.replicas = replicas
        self.poll_s = poll_s
        self.answered: Counter[str] = Counter()
        """Requests (and datagrams) answered, by pod name."""
        self.received: Counter[str] = Counter()
        """Requests (and datagrams) each Node took on a Service's node port, by Node."""
        self._services: dict[str, Service] = {}
        self._by_port: dict[_Port, _Served] = {}
        self._pods: dict[str, list[Pod]] = {}
        self._agents: dict[str, _Agent] = {}
        self._nodes: dict[str, str] = {}  # running Node -> its address
        self._turn = itertools.count()
        self._affinity: dict[tuple[str, str], str] = {}

    # -- the pods ------------------------------------------------------------------------
    def pods(self, service: str | None = None) -> list[Pod]:
        """The pods (of the Service "namespace/name", or all), in name order."""
        keys = [service] if service is not None else sorted(self._pods)
        return [pod for key in keys for pod in self._pods.get(key, [])]

    def move_pod(self, service: str, pod: str, node: str) -> Pod:
        """Place pod `pod` of `service` on `node` (a running Node), as a rescheduling would."""
        if node not in self._nodes:
            raise ValueError(f"move_pod: Node {node} is not running (or has no loopback IP)")
        pods = self._pods.get(service, [])
        for index, found in enumerate(pods):
            if found.name == pod:
                moved = pods[index] = Pod(service, pod, node)
                log.info("pod.moved", service=service, pod=pod, node=node)
                return moved
        raise ValueError(f"move_pod: Service {service} has no pod {pod}")

    def _replicas(self, svc: Service) -> int:
        wanted = svc.metadata.annotations.get(REPLICAS_ANNOTATION)
        if wanted is None:
            return self.replicas
        try:
            count = int(wanted)
        except ValueError:
            count = -1
        if count < 0:
            log.warning(
                "pod.bad-replicas",
                service=svc.key,
                annotation=REPLICAS_ANNOTATION,
                value=wanted,
                fix="a whole number of 0 or more",
            )
            return self.replicas
        return count

    def _place(self) -> None:
        """Every Service gets its pods; pods on Nodes gone or stopped are placed again."""
        load: Counter[str] = Counter(dict.fromkeys(self._nodes, 0))
        for pods in self._pods.values():
            load.update(p.node for p in pods if p.node in self._nodes)
        for key in [k for k in self._pods if k not in self._services]:
            del self._pods[key]
        for key, svc in self._services.items():
            want = self._replicas(svc)
            pods = [p for p in self._pods.get(key, []) if int(p.name.rsplit("-", 1)[1]) < want]
            names = {p.name for p in pods}
            for index in range(want):
                name = f"{svc.metadata.name}-{index}"
                if name not in names:
                    pods.append(Pod(key, name, ""))
            placed = []
            for pod in sorted(pods, key=lambda p: int(p.name.rsplit("-", 1)[1])):
                if pod.node not in self._nodes:
                    if not load:
                        placed.append(Pod(key, pod.name, ""))
                        continue
                    node = min(load, key=lambda n: (load[n], n))
                    load[node] += 1
                    pod = Pod(key, pod.name, node)
                placed.append(pod)
            self._pods[key] = placed

    # -- running ---------------------------------------------------------------------------
    async def serve(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Serve until cancelled; `task_status.started()` after the first look."""
        async with trio.open_nursery() as nursery:
            await self._sync(nursery)
            task_status.started()
            while True:
                await trio.sleep(self.poll_s)
                await self._sync(nursery)

    async def _sync(self, nursery: trio.Nursery) -> None:
        try:
            listed = await self.kube.list(SERVICES, type=Service)
        except KubeError as exc:
            log.warning("kube-proxy.list-failed", error=str(exc))
            return
        self._services = {
            svc.key: svc
            for svc in listed.items
            if svc.spec.type in ("NodePort", "LoadBalancer")
            and any(p.node_port for p in svc.spec.ports)
        }
        by_port: dict[_Port, _Served] = {}
        for key, svc in self._services.items():
            served = _Served(
                key,
                local=svc.spec.external_traffic_policy == "Local",
                sticky=svc.spec.session_affinity == "ClientIP",
                health_port=svc.spec.health_check_node_port,
            )
            for port in svc.spec.ports:
                if port.node_port:
                    by_port[_Port(port.protocol, port.node_port)] = served
            if served.local and served.health_port:
                by_port[_Port("HEALTH", served.health_port)] = served
        self._by_port = by_port
        self._nodes = {
            i.name: i.internal_ips[0]
            for i in self.cloud.instances()
            if i.state == "running" and i.internal_ips and is_loopback(i.internal_ips[0])
        }
        self._place()
        for name, agent in list(self._agents.items()):
            if self._nodes.get(name) != agent.address:
                agent.scope.cancel()
                del self._agents[name]
                log.info("kube-proxy.stopped", node=name)
        for name, address in self._nodes.items():
            found = self._agents.get(name)
            if found is None:
                agent = self._agents[name] = _Agent(name, address)
                nursery.start_soon(self._run_agent, agent, name=f"kube-proxy/{name}")
            else:
                found.changed.set()

    def _wanted_ports(self) -> set[tuple[str, int]]:
        ports = {(p.protocol, p.node_port) for p in self._by_port}
        ports.add(("HEALTH", KUBE_PROXY_HEALTH_PORT))
        return ports

    async def _run_agent(self, agent: _Agent) -> None:
        with agent.scope:
            async with trio.open_nursery() as nursery:
                while True:
                    wanted = self._wanted_ports()
                    for key, scope in list(agent.listeners.items()):
                        if key not in wanted:
                            scope.cancel()
                            del agent.listeners[key]
                    for key in wanted - agent.listeners.keys():
                        scope = agent.listeners[key] = trio.CancelScope()
                        nursery.start_soon(self._listen, agent, key, scope)
                    await agent.changed.wait()
                    agent.changed = trio.Event()

    async def _listen(self, agent: _Agent, key: tuple[str, int], scope: trio.CancelScope) -> None:
        kind, port = key
        with scope:
            udp = kind == "UDP"
            while True:
                sock = trio.socket.socket(
                    trio.socket.AF_INET, trio.socket.SOCK_DGRAM if udp else trio.socket.SOCK_STREAM
                )
                try:
                    sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
                    await sock.bind((agent.address, port))
                except OSError as exc:
                    sock.close()
                    agent.errors[key] = f"{agent.address}:{port}/{kind}: {exc.strerror or exc}"
                    log.warning("kube-proxy.listen-failed", error=agent.errors[key])
                    await trio.sleep(_BIND_RETRY_S)
                    continue
                break
            agent.errors.pop(key, None)
            if udp:
                with sock:
                    await self._serve_udp(agent, sock, port)
                return
            sock.listen(128)

            async def handler(stream: trio.SocketStream) -> None:
                await self._serve_tcp(agent, stream, kind, port)

            await trio.serve_listeners(handler, [trio.SocketListener(sock)])

    # -- answering ---------------------------------------------------------------------------
    def _endpoints(self, agent: _Agent, served: _Served) -> list[Pod]:
        pods = [p for p in self._pods.get(served.key, []) if p.node in self._nodes]
        if served.local:
            pods = [p for p in pods if p.node == agent.node]
        return pods

    def _choose(self, agent: _Agent, served: _Served, client: str) -> Pod | None:
        pods = self._endpoints(agent, served)
        if not pods:
            return None
        if served.sticky:
            held = self._affinity.get((served.key, client))
            for pod in pods:
                if pod.name == held:
                    return pod
        pod = pods[next(self._turn) % len(pods)]
        if served.sticky:
            self._affinity[(served.key, client)] = pod.name
        return pod

    def _answer(self, agent: _Agent, pod: Pod, client: str) -> bytes:
        """The pod's answer; a pod on another Node sees this Node's address (SNAT)."""
        self.answered[pod.name] += 1
        source = client if pod.node == agent.node else agent.address
        return msgspec.json.encode(Answer(pod.name, pod.node, source, pod.service))

    async def _serve_tcp(
        self, agent: _Agent, stream: trio.SocketStream, kind: str, port: int
    ) -> None:
        async with stream:
            try:
                client = stream.socket.getpeername()[0]
            except OSError:
                return
            if kind == "HEALTH":
                await _serve_http(stream, lambda path: self._health(agent, port, path))
                return
            served = self._by_port.get(_Port(kind, port))
            if served is None:
                return
            pod = self._choose(agent, served, client)
            if pod is None:
                return  # Local without a pod here: the connection is refused

            def respond(path: str) -> Awaitable[tuple[int, bytes]]:
                self.received[agent.node] += 1  # a request (a health check's connect is not)
                return _ready(200, self._answer(agent, pod, client))

            await _serve_http(stream, respond)

    def _health(self, agent: _Agent, port: int, path: str) -> Awaitable[tuple[int, bytes]]:
        if path.split("?")[0] != "/healthz":
            return _ready(404, b'{"error": "not found"}')
        if port == KUBE_PROXY_HEALTH_PORT:
            return _ready(200, b'{"serviceProxyHealthy": true}')
        served = self._by_port.get(_Port("HEALTH", port))
        if served is None:
            return _ready(404, b'{"error": "no Service has this health check node port"}')
        count = len(self._endpoints(agent, served))
        namespace, _, name = served.key.partition("/")
        body = msgspec.json.encode(
            {
                "service": {"namespace": namespace, "name": name},
                "localEndpoints": count,
                "serviceProxyHealthy": True,
            }
        )
        return _ready(200 if count else 503, body)

    async def _serve_udp(self, agent: _Agent, sock: trio.socket.SocketType, port: int) -> None:
        while True:
            try:
                _, peer = await sock.recvfrom(65536)
            except OSError:
                continue
            served = self._by_port.get(_Port("UDP", port))
            if served is None:
                continue
            client = str(peer[0])
            self.received[agent.node] += 1
            pod = self._choose(agent, served, client)
            if pod is None:
                continue
            with contextlib.suppress(OSError):
                await sock.sendto(self._answer(agent, pod, client), peer)

    def statistics(self) -> dict[str, object]:
        return {
            "nodes": len(self._agents),
            "pods": sum(len(p) for p in self._pods.values()),
            "answered": sum(self.answered.values()),
            "listenErrors": [e for a in self._agents.values() for e in a.errors.values()],
        }


async def _ready(status: int, body: bytes) -> tuple[int, bytes]:
    return status, body


_REASONS: Final = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}


async def _serve_http(
    stream: trio.SocketStream, respond: Callable[[str], Awaitable[tuple[int, bytes]]]
) -> None:
    """Answer HTTP/1.1 requests on `stream` (kept alive) until the client closes."""
    buffer = bytearray()
    try:
        while True:
            while b"\r\n\r\n" not in buffer:
                if len(buffer) > _MAX_HEAD:
                    return
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                buffer += chunk
            head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
            buffer = bytearray(rest)  # requests carry no body here (GET)
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            path = parts[1] if len(parts) > 1 else "/"
            close = parts[-1] == "HTTP/1.0" or any(
                line.lower().replace(" ", "") == "connection:close" for line in lines[1:]
            )
            status, body = await respond(path)
            head_out = (
                f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body) + 1}\r\n"
                + ("Connection: close\r\n" if close else "")
                + "\r\n"
            )
            await stream.send_all(head_out.encode() + body + b"\n")
            if close:
                return
    except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
        return
