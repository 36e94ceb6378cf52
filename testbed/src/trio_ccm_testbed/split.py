"""A test world in two processes, so that the emulator serving a CCM keeps up at 100,000 Nodes.

`trio-ccm testbed` runs the emulator, the simulated cloud and every simulated kubelet on one
Trio thread. At 100,000 Nodes that thread also built the world (minutes of registrations)
and took 333 heartbeats a second, and its collector walked the 4.7 GB of stored objects: it
answered the CCM seconds late. Here the world is two processes:

- the **emulator process** (`python -m trio_ccm_testbed.split emulator`) first builds the
  world (`--nodes N`: `register_nodes` registers each Node as its kubelet would, through
  the emulator's own request handler, a progress line every `--progress-every` Nodes),
  then serves only the Kubernetes API on loopback HTTP. Its collector is tuned for a large
  stored world (`tune_collector`: young collections only; the stored objects are never
  walked again),
  and a `LagWatch` task logs every lag of its loop of `--lag-threshold` (1 s) or more
  (`testbed.lag`) and, when it stops, the longest (`testbed.lag-summary`); a request whose
  handling takes `--slow-request` (0.2 s) or more is logged with its verb, path, query and
  client (`testbed.slow-request`: which requests a lag was);
- the **kubelets process** (`python -m trio_ccm_testbed.split kubelets --server URL`) runs
  the simulated cloud (on loopback HTTP, its admin API included: instances added there get
  kubelets within a second) and the `Testbed` whose kubelets heartbeat their Nodes (and
  register new ones; `--registered`: the emulator built the `--nodes`) through the
  emulator's HTTP door, as any other client: `--max-in-flight` (8) writes at once, their
  status patches straight through a lean HTTP/1.1 pool (`Http1StatusWriter`), and a join's
  registrations `--max-registering` (32) more of their own; they follow the cloud by its
  change log, not a walk of every instance, every `--poll` (0.1 s). It prints a progress line every
  `--progress-every` (10,000) Nodes registered, then `N nodes registered`.

`bench/scale.py` starts both. Each refuses a non-loopback address.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import math
import resource
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import ClassVar, Final
from urllib.parse import quote, urlsplit

import httpx
import msgspec
import structlog
import trio

from trio_ccm.cli.stalls import StallWatch
from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.config import ConnectionConfig, StaticCredentials
from trio_ccm.kube.errors import error_from_response
from trio_ccm.kube.patches import STRATEGIC
from trio_ccm.logs import configure_logging
from trio_ccm_testbed._http import Request, Response
from trio_ccm_testbed.apiserver import ApiServer, serve_apiserver
from trio_ccm_testbed.cloud import SimCloud, serve_sim_cloud, write_cloud_config
from trio_ccm_testbed.datapath import traffic_pools
from trio_ccm_testbed.loopback import is_loopback
from trio_ccm_testbed.testbed import (
    KUBELET_VERSION,
    Testbed,
    launch_instances,
    node_manifest,
)

__all__ = [
    "Http1Pool",
    "Http1StatusWriter",
    "LagWatch",
    "TimedApiServer",
    "emulator_main",
    "kubelets_client",
    "kubelets_main",
    "main",
    "register_nodes",
    "tune_collector",
    "watch_progress",
]

log = structlog.get_logger("trio_ccm_testbed.split")

YOUNG_THRESHOLDS: Final = (10_000, 20)
"""Generation 0 is collected every 10,000 net allocations (CPython's default: 700), and
generation 1 every 20 of those: short-lived cycles (requests, tasks) are still found."""
NEVER: Final = 2**30
"""Generation 2's threshold: its automatic collections never come."""


def tune_collector() -> tuple[int, ...]:
    """Tune this process's collector for a large stored world; the thresholds it had.

    A stored object outlives two young collections and lands in the oldest generation,
    whose full collections walk every object in it: with 100,000 stored Nodes, millions of
    dicts and strings, for seconds at a time (the freeze after the build only delays them:
    each heartbeat replaces a Node, so the old generation fills again). Those objects hold no
    cycles (JSON documents are trees, freed by their reference counts), so the oldest
    generation is never collected automatically: a cycle that outlives two young collections
    stays until the process ends (`gc.collect()` still finds it)."""
    previous = gc.get_threshold()
    gc.set_threshold(*YOUNG_THRESHOLDS, NEVER)
    return previous


@dataclass
class LagWatch:
    """A task that wakes every `period_s` and records how late it woke: a lag of
    `threshold_s` or more is a stall of the whole loop (one long step, a collection, or
    many steps queued), logged as `testbed.lag`."""

    threshold_s: float = 1.0
    period_s: float = 0.1
    lags: list[float] = field(default_factory=list)
    """The lags of `threshold_s` or more, in seconds, in order."""
    max_s: float = 0.0
    """The longest lag seen (of any size)."""
    wakes: int = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Watch until cancelled; then log `testbed.lag-summary` (the longest lag)."""
        task_status.started()
        log.info("testbed.lag-watch", threshold_s=self.threshold_s, period_s=self.period_s)
        try:
            while True:
                due = trio.current_time() + self.period_s
                await trio.sleep_until(due)
                lag = trio.current_time() - due
                self.wakes += 1
                self.max_s = max(self.max_s, lag)
                if lag >= self.threshold_s:
                    self.lags.append(lag)
                    log.warning(
                        "testbed.lag",
                        seconds=round(lag, 3),
                        collections=gc.get_stats()[2]["collections"],
                    )
        finally:
            log.info(
                "testbed.lag-summary",
                max_seconds=round(self.max_s, 3),
                lags=len(self.lags),
                threshold_s=self.threshold_s,
                wakes=self.wakes,
            )


class TimedApiServer(ApiServer):
    """The emulator, logging each request whose handling (until its answer's head is ready;
    a watch's stream is not counted) took `slow_s` or more, by Trio's clock, with the CPU
    this thread spent meanwhile: `testbed.slow-request`, with its method, path, query and
    user agent.

    The thread's CPU clock is read at most once every `CPU_MARK_S` (a system call, not a
    vDSO read: one per request was 6.6 % of the emulator's busy samples at 20,000 Nodes),
    so a slow request's CPU counts from the last mark before it began: up to `CPU_MARK_S`
    more than its own."""

    slow_s: float = 0.2
    CPU_MARK_S: ClassVar[float] = 0.05
    _mark: tuple[float, float] = (-math.inf, 0.0)

    async def handle(self, request: Request) -> Response:
        wall0 = trio.current_time()
        if wall0 - self._mark[0] >= self.CPU_MARK_S:
            self._mark = (wall0, time.thread_time())
        cpu0 = self._mark[1]
        response = await super().handle(request)
        wall = trio.current_time() - wall0
        if wall >= self.slow_s:
            query = "&".join(f"{k}={v}" for k, values in request.query.items() for v in values)
            log.warning(
                "testbed.slow-request",
                seconds=round(wall, 3),
                cpu_seconds=round(time.thread_time() - cpu0, 3),
                method=request.method,
                path=request.raw_path,
                query=query[:200],
                status=response.status,
                agent=request.headers.get("user-agent", "")[:60],
            )
        return response


class Http1Pool(httpx.AsyncBaseTransport):
    """A lean HTTP/1.1 transport for many small requests to one loopback server: at most
    `size` kept-alive connections, each request written in one send, each answer read by
    its Content-Length. httpx's own pool polls every idle connection on each request and
    release, which cost the kubelets' process more than the emulator's whole answer. Not
    for streamed answers (watches): those are refused."""

    def __init__(self, host: str, port: int, *, size: int) -> None:
        self._host, self._port = host, port
        self._slots = trio.Semaphore(size)
        self._idle: list[tuple[trio.SocketStream, bytearray]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
        status, answer, content = await self.exchange(
            request.method, request.url.raw_path.decode(), headers, body
        )
        return httpx.Response(status, headers=answer, content=content, request=request)

    async def exchange(
        self, method: str, target: str, headers: Sequence[tuple[bytes, bytes]], body: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """One request (`headers` without Content-Length, which is added) and its answer:
        status, headers, body. No httpx on this path (`Http1StatusWriter`)."""
        head = [f"{method} {target} HTTP/1.1".encode(), *(k + b": " + v for k, v in headers)]
        head.append(b"content-length: %d" % len(body))
        wire = b"\r\n".join(head) + b"\r\n\r\n" + body
        async with self._slots:
            while True:
                reused = bool(self._idle)
                stream, buffer = (
                    self._idle.pop()
                    if reused
                    else (await trio.open_tcp_stream(self._host, self._port), bytearray())
                )
                try:
                    await stream.send_all(wire)
                    status, answer, content, keep = await _read_answer(stream, buffer)
                except (_NoAnswer, trio.BrokenResourceError):
                    await trio.aclose_forcefully(stream)
                    if reused and not buffer:
                        # The server had closed this idle connection (its keep-alive
                        # timeout) as we sent: it read nothing, so the request goes again
                        # on a new connection, as HTTP clients do. A new connection's
                        # failure is raised.
                        continue
                    raise
                except BaseException:
                    await trio.aclose_forcefully(stream)
                    raise
                break
            if keep:
                self._idle.append((stream, buffer))
            else:
                await trio.aclose_forcefully(stream)
        return status, answer, content

    async def aclose(self) -> None:
        while self._idle:
            await trio.aclose_forcefully(self._idle.pop()[0])


class _NoAnswer(httpx.RemoteProtocolError):
    """The server closed the connection before any byte of an answer."""


async def _read_answer(
    stream: trio.SocketStream, buffer: bytearray
) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    """One response: status, headers, body, and whether the connection may be kept."""
    while (end := buffer.find(b"\r\n\r\n")) < 0:
        chunk = await stream.receive_some(65536)
        if not chunk:
            if not buffer:
                raise _NoAnswer("the server closed the connection before answering")
            raise httpx.RemoteProtocolError("the server closed the connection mid-answer")
        buffer += chunk
    lines = bytes(buffer[:end]).split(b"\r\n")
    del buffer[: end + 4]
    status = int(lines[0].split(b" ", 2)[1])
    headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(b":") for line in lines[1:])]
    fields = {k.lower(): v for k, v in headers}
    if b"content-length" not in fields:
        raise httpx.RemoteProtocolError("an answer without Content-Length (a stream?)")
    length = int(fields[b"content-length"])
    while len(buffer) < length:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise httpx.RemoteProtocolError("the server closed the connection mid-answer")
        buffer += chunk
    content = bytes(buffer[:length])
    del buffer[:length]
    return status, headers, content, fields.get(b"connection", b"").lower() != b"close"


class Http1StatusWriter:
    """The kubelets' status patches and registrations (`StatusWriter`) straight through an
    `Http1Pool`, with
    the kube client's user agent (so the same field manager) and its error mapping: at
    333 a second, httpx's request building, auth, redirect and cookie steps cost the
    kubelets' process more than the socket did. A refusal is not retried here; a kubelet
    posts again at its next beat."""

    def __init__(self, pool: Http1Pool, *, host: str, user_agent: str) -> None:
        self._pool = pool
        common = [
            (b"host", host.encode()),
            (b"accept", b"application/json"),
            (b"user-agent", user_agent.encode()),
        ]
        self._headers = [*common, (b"content-type", STRATEGIC.encode())]
        self._create_headers = [*common, (b"content-type", b"application/json")]

    async def patch_status(self, name: str, body: bytes) -> None:
        path = f"/api/v1/nodes/{quote(name, safe='')}/status"
        await self._send("PATCH", path, self._headers, body)

    async def register_node(self, body: bytes) -> None:
        """`POST /api/v1/nodes` (a join's registrations: 1,000 at once, each through httpx's
        request building cost the kubelets' process more than the emulator's answer)."""
        await self._send("POST", "/api/v1/nodes", self._create_headers, body)

    async def _send(
        self, method: str, path: str, head: list[tuple[bytes, bytes]], body: bytes
    ) -> None:
        status, headers, content = await self._pool.exchange(method, path, head, body)
        if status >= 400:
            fields = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers}
            raise error_from_response(method, path, status, content, fields)


KUBELET_AGENT: Final = f"kubelet/{KUBELET_VERSION} (linux/amd64) kubernetes/sim"


async def register_nodes(
    api: ApiServer,
    cloud: SimCloud,
    count: int,
    *,
    initialised: bool,
    every: int,
    say: Callable[[str], None],
) -> None:
    """The world's builder: launch `count` instances in `cloud` (a replica of the kubelets'
    process's cloud: same seed, same pools, so the same instances) and register each one's
    Node in `api` as its kubelet would (`POST /api/v1/nodes`, the kubelet's manifest and
    user agent), through the emulator's own request handler, without a socket: the same
    defaults, validation and managed fields as over HTTP, at a third of the cost. `say` a
    line every `every` Nodes (count, seconds, peak RSS). Raises naming the Node if one is
    refused."""
    started = time.monotonic()
    headers = [
        ("content-type", "application/json"),
        ("accept", "application/json"),
        ("user-agent", KUBELET_AGENT),
    ]
    instances = launch_instances(cloud, count)
    for done, instance in enumerate(instances, 1):
        manifest = node_manifest(instance, now=dt.datetime.now(dt.UTC), initialised=initialised)
        request = Request.build("POST", "/api/v1/nodes", "", headers, _encode(manifest))
        response = await api.handle(request)
        if response.status != 201:
            body = response.body if isinstance(response.body, bytes) else b""
            raise RuntimeError(
                f"the world's builder: Node {instance.name} was refused "
                f"({response.status}): {body[:300]!r}"
            )
        if done % every == 0 or done == len(instances):
            rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            say(
                f"registered {done} of {count} Nodes after {time.monotonic() - started:.1f} s "
                f"(emulator's peak RSS {rss_mb:.0f} MB)"
            )
        await trio.lowlevel.checkpoint()  # a step per Node, as requests are


_encode = msgspec.json.Encoder().encode


def kubelets_client(
    server: str, *, max_in_flight: int = 8, max_registering: int = 8
) -> tuple[KubeClient, Http1StatusWriter]:
    """The kubelets' client of an emulator at `server` (plain HTTP on loopback; refused
    otherwise), and their status writer, sharing one pool with as many connections as
    writes in flight: `max_in_flight` writes and `max_registering` registrations
    (`Testbed`)."""
    host = urlsplit(server).hostname or ""
    if urlsplit(server).scheme != "http" or not is_loopback(host):
        raise ValueError(
            f"--server {server}: the kubelets write to an emulator on loopback over plain "
            "HTTP only (e.g. http://127.0.0.1:PORT, as `split emulator` prints it)"
        )
    port = urlsplit(server).port or 80
    pool = Http1Pool(host, port, size=max_in_flight + max_registering)
    client = KubeClient(
        ConnectionConfig(
            server=server,
            credentials=StaticCredentials(token=None),
            source="trio-ccm testbed kubelets (split)",
        ),
        qps=0,  # kubelets each have their own budget; the fleet's is not limited
        component="testbed-kubelets",
        transport=pool,
    )
    writer = Http1StatusWriter(pool, host=urlsplit(server).netloc, user_agent=client.user_agent)
    return client, writer


async def watch_progress(
    registered: Callable[[], int],
    total: int,
    *,
    every: int,
    say: Callable[[str], None],
    period_s: float = 1.0,
) -> None:
    """Until `registered()` reaches `total`: `say` a line each time `every` more Nodes are
    registered (count, seconds since the start, this process's peak RSS)."""
    started = trio.current_time()
    shown = 0
    while True:
        count = registered()
        if count >= total or count >= shown + every:
            shown = count - count % every if count < total else count
            rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            say(
                f"registered {count} of {total} Nodes after "
                f"{trio.current_time() - started:.1f} s (kubelets' peak RSS {rss_mb:.0f} MB)"
            )
        if count >= total:
            return
        await trio.sleep(period_s)


async def _stop_at_a_signal(nursery: trio.Nursery) -> None:
    """Cancel `nursery` at the first SIGINT or SIGTERM (a clean stop: the lag summary)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            nursery.cancel_scope.cancel()
            return


def _print(text: str) -> None:
    print(text, flush=True)


def _duration(text: str) -> float:
    value = float(text[:-1]) if text.endswith("s") else float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: a positive number of seconds, e.g. 300s")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trio_ccm_testbed.split", description=(__doc__ or "").split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    emulator = commands.add_parser("emulator", help="the Kubernetes API emulator alone")
    emulator.add_argument("--kubeconfig-out", required=True, metavar="PATH")
    emulator.add_argument("--host", default="127.0.0.1")
    emulator.add_argument("--port", type=int, default=0)
    emulator.add_argument("--seed", type=int, default=0)
    emulator.add_argument("--lag-threshold", type=_duration, default=1.0, metavar="SECONDS")
    emulator.add_argument(
        "--slow-request",
        type=_duration,
        default=0.2,
        metavar="SECONDS",
        help="log each request handled in this long or longer (testbed.slow-request)",
    )
    emulator.add_argument(
        "--default-gc", action="store_true", help="keep CPython's collector thresholds"
    )
    emulator.add_argument(
        "--nodes", type=int, default=0, help="register this many Nodes before serving"
    )
    emulator.add_argument("--initialised", action="store_true")
    emulator.add_argument("--lb-network", default=None, metavar="CIDR")
    emulator.add_argument("--progress-every", type=int, default=10_000)
    kubelets = commands.add_parser("kubelets", help="the simulated cloud and its kubelets")
    kubelets.add_argument("--server", required=True, help="the emulator's URL")
    kubelets.add_argument("--nodes", type=int, default=3)
    kubelets.add_argument("--initialised", action="store_true")
    kubelets.add_argument(
        "--registered",
        action="store_true",
        help="the emulator registered the --nodes (its --nodes, same --seed and pools)",
    )
    kubelets.add_argument("--heartbeat", type=_duration, default=60.0, metavar="SECONDS")
    kubelets.add_argument(
        "--poll",
        type=_duration,
        default=0.1,
        metavar="SECONDS",
        help="how often the kubelets read the cloud's changes (0.1s: a launched instance's "
        "kubelet starts at once, as on a booted VM; a read is what changed, not every instance)",
    )
    kubelets.add_argument("--no-node-leases", action="store_true")
    kubelets.add_argument("--seed", type=int, default=0)
    kubelets.add_argument("--lb-network", default=None, metavar="CIDR")
    kubelets.add_argument("--cloud-config-out", required=True, metavar="PATH")
    kubelets.add_argument("--host", default="127.0.0.1")
    kubelets.add_argument("--max-in-flight", type=int, default=8)
    kubelets.add_argument(
        "--max-registering",
        type=int,
        default=32,
        help="registrations in flight besides --max-in-flight (a join's kubelets each post "
        "their Node at once; they do not queue behind the fleet's heartbeats)",
    )
    kubelets.add_argument("--progress-every", type=int, default=10_000)
    return parser


def emulator_main(args: argparse.Namespace) -> int:
    """The emulator alone, with a tuned collector and a lag watch, until SIGINT."""
    if not is_loopback(args.host):
        print(f"--host {args.host}: the emulator listens on loopback only", file=sys.stderr)
        return 2
    if not args.default_gc:
        tune_collector()
    watch = LagWatch(threshold_s=args.lag_threshold)

    try:
        pools = traffic_pools(args.lb_network, None)
    except ValueError as exc:
        print(f"trio-ccm testbed emulator: error: {exc}", file=sys.stderr)
        return 2

    async def run() -> None:
        api = TimedApiServer(seed=args.seed)
        api.slow_s = args.slow_request
        if args.nodes:
            await register_nodes(
                api,
                SimCloud(seed=args.seed, **pools),
                args.nodes,
                initialised=args.initialised,
                every=args.progress_every,
                say=_print,
            )
            gc.freeze()  # built: the young collections need not look at it again
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_at_a_signal, nursery)
            await nursery.start(watch.run)
            listening = await nursery.start(
                partial(serve_apiserver, api, host=args.host, port=args.port)
            )
            listening.write_kubeconfig(args.kubeconfig_out)
            _print(f"apiserver listening on {listening.url}")

    return _run_watched(run)


def kubelets_main(args: argparse.Namespace) -> int:
    """The simulated cloud and the kubelets of its `--nodes` instances, until SIGINT."""
    tune_collector()  # 100,000 kubelets' tasks are a large world too (the cloud answers)
    try:
        client, writer = kubelets_client(
            args.server, max_in_flight=args.max_in_flight, max_registering=args.max_registering
        )
        pools = traffic_pools(args.lb_network, None)
    except ValueError as exc:
        print(f"trio-ccm testbed kubelets: error: {exc}", file=sys.stderr)
        return 2
    if not is_loopback(args.host):
        print(f"--host {args.host}: the simulated cloud listens on loopback only", file=sys.stderr)
        return 2

    async def run() -> None:
        cloud = SimCloud(seed=args.seed, **pools)
        testbed = Testbed(
            client,
            cloud,
            heartbeat_s=args.heartbeat,
            poll_s=args.poll,
            seed=args.seed,
            node_lease_s=None if args.no_node_leases else 40.0,
            max_in_flight=args.max_in_flight,
            status_writer=writer,
            max_registering=args.max_registering,
        )
        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_at_a_signal, nursery)
            progress = trio.Event()

            async def say_progress() -> None:
                await watch_progress(
                    lambda: testbed.statistics().registered,
                    args.nodes,
                    every=args.progress_every,
                    say=_print,
                )
                progress.set()

            listening = await nursery.start(partial(serve_sim_cloud, cloud, host=args.host))
            write_cloud_config(args.cloud_config_out, url=listening.url)
            _print(f"sim cloud listening on {listening.url}")
            testbed.add_nodes(args.nodes, initialised=args.initialised, registered=args.registered)
            nursery.start_soon(say_progress)
            await nursery.start(testbed.serve)
            await progress.wait()  # its last line, the total, before the one below
            gc.freeze()  # built: 100,000 kubelets' tasks, which young collections need not walk
            _print(
                f"{args.nodes} nodes registered after {time.monotonic() - started:.1f} s "
                f"(heartbeat every {args.heartbeat:g}s); Ctrl-C to stop"
            )

    return _run_watched(run)


def _run_watched(run: Callable[[], Awaitable[None]]) -> int:
    """`trio.run(run)` under a StallWatch (it names the step of a lag, and its collections'
    share); 0 once it returns."""
    stalls = StallWatch()
    stalls.track_gc()
    try:
        trio.run(run, instruments=[stalls])
    finally:
        stalls.untrack_gc()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(verbosity=0, fmt="json", stream=sys.stderr)
    if args.command == "emulator":
        return emulator_main(args)
    return kubelets_main(args)


if __name__ == "__main__":
    sys.exit(main())
