"""Leader failover: from a leader's crash, and from its graceful shutdown, to the new leader's
controllers running.

    python bench/failover.py [--quick] [--rounds N] [--lease-duration S] [--renew-deadline S]
                             [--retry-period S] [--nodes N] [--tls] [--cold] [--seed N]

One `trio.run`: the emulator on a real loopback listener (`serve_apiserver`, plain HTTP or
`--tls`) holding `--nodes` realistic Nodes, and replicas of trio-ccm, each a `serve()` call in
its own cancel scope with its own kube clients over real HTTP, a cloud with no capability
(so every built-in controller is skipped) and one extra controller, `failover-probe`, which
reads the Node and Service caches and records `trio.current_time()` when it starts: that
instant is "the new leader's controllers running". Times are Trio's clock, which in a real
run is `time.perf_counter()`. `--seed` fixes the random delays and the replicas' jitter
draws (it is random by default, and printed); the timings themselves stay real.

Each round runs three fresh replicas, one standby at a time:

1. crash: A leads; B starts and waits until its caches are synced (warm, as every replica
   runs its informers) and a random 2-4 retry periods more, so that the failure falls at a
   random phase of A's renewals and B's attempts. Then A's transport is killed (every
   further request raises ConnectError, like a process killed with -9: its Lease release
   fails, so the Lease stays held) and A's scope is cancelled. Measured: from the kill to
   B's probe starting (`crash_takeover_s`).
2. graceful: B leads; C starts, warms up and waits the same way; then `B.shut_down()`.
   Measured: from that call to C's probe starting (`graceful_takeover_s`).

With `--cold`, each round is followed by a cold round: the standby is started at the moment
of the failure (a replacement pod), not beforehand.

Every replica's transport also notes its Lease requests (when, and the holder and renewTime
sent or read), which splits each takeover into its parts: when the standby first saw the
record it took over, its wait for its next attempt, and its start-up after acquiring.
Prints per-round figures, then one JSON object as the last line (medians, min, max).
Benchmarks print numbers; they never assert on time.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import ssl
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

import httpx
import prometheus_client
import trio

from _common import print_figures, quiet_logging
from apiserver import make_node
from trio_ccm.actors.controller import Controller, ControllerContext
from trio_ccm.cloud import Instances, LoadBalancers, Routes
from trio_ccm.kube.config import ConnectionConfig, StaticCredentials
from trio_ccm.kube.leader import JITTER_FACTOR, validate_timing
from trio_ccm.settings import Settings
from trio_ccm.supervisor import Serving, serve
from trio_ccm_testbed.apiserver import ApiServer, serve_apiserver

PROBE: Final = "failover-probe"
LEASE: Final = ("coordination.k8s.io/v1", "Lease", "cloud-controller-manager", "kube-system")
LEASES_PATH: Final = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
GOAL_GRACEFUL_S: Final = 3.0
POLL_S: Final = 0.01


# -- the parts of a replica -----------------------------------------------------------------
class NoCapabilities:
    """A cloud offering nothing: every built-in controller is skipped, only the probe runs."""

    name: str = "none"
    instances: Instances | None = None
    load_balancers: LoadBalancers | None = None
    routes: Routes | None = None

    async def initialize(self) -> None:
        pass


@dataclass(frozen=True)
class LeaseCall:
    """One Lease request a replica made, as its transport saw it."""

    method: str
    started: float
    ended: float
    status: int
    holder: str | None  # sent (PUT, POST) or read (GET); None: no readable spec
    renew_time: str | None


def _spec(body: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(body)
    except ValueError:
        return {}
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return spec if isinstance(spec, dict) else {}


class Link(httpx.AsyncBaseTransport):
    """A replica's connection to the API server: real HTTP, noting its Lease requests.

    After `kill()` every request raises ConnectError, as for a process that has died.
    """

    def __init__(self, inner: httpx.AsyncHTTPTransport) -> None:
        self.inner = inner
        self.killed = False
        self.lease_calls: list[LeaseCall] = []

    def kill(self) -> None:
        self.killed = True

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.killed:
            raise httpx.ConnectError("killed by the benchmark", request=request)
        if not request.url.path.startswith(LEASES_PATH) or request.url.params.get("watch"):
            # Streams (the standby's Lease watch) pass through unbuffered.
            return await self.inner.handle_async_request(request)
        started = trio.current_time()
        response = await self.inner.handle_async_request(request)
        try:
            raw = b"".join([chunk async for chunk in response.aiter_raw()])
        finally:
            await response.aclose()
        ended = trio.current_time()
        spec: dict[str, Any] = {}
        if request.method in ("PUT", "POST"):
            spec = _spec(request.content)
        elif response.status_code == 200:
            spec = _spec(raw)
        self.lease_calls.append(
            LeaseCall(
                request.method,
                started,
                ended,
                response.status_code,
                spec.get("holderIdentity") if spec else None,
                spec.get("renewTime") if spec else None,
            )
        )
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=httpx.ByteStream(raw),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()

    def acquired(self, identity: str, after: float) -> LeaseCall | None:
        """The first successful write making `identity` the holder, after `after`."""
        for call in self.lease_calls:
            if (
                call.started >= after
                and call.method in ("PUT", "POST")
                and call.status in (200, 201)
                and call.holder == identity
            ):
                return call
        return None


@dataclass(eq=False)
class Replica:
    """One `serve()` call in its own cancel scope, with its probe controller's start times."""

    identity: str
    link: Link
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    serving: Serving | None = None
    probe_starts: list[float] = field(default_factory=list)
    probe_started: trio.Event = field(default_factory=trio.Event)
    stopped: trio.Event = field(default_factory=trio.Event)
    stopped_at: float = 0.0  # when serve() returned or was cancelled (with `stopped`)

    def controller(self) -> type[Controller]:
        """The probe: a controller recording when each of its terms starts."""
        replica = self

        class Probe(Controller):
            name = PROBE
            informers = frozenset({"nodes", "services"})

            async def run(self, ctx: ControllerContext) -> None:
                replica.probe_starts.append(trio.current_time())
                replica.probe_started.set()
                await trio.sleep_forever()

        return Probe

    async def run(
        self,
        settings: Settings,
        connection: ConnectionConfig,
        rng: random.Random,
        *,
        task_status: trio.TaskStatus[Serving],
    ) -> None:
        try:
            with self.scope:
                await serve(
                    settings,
                    NoCapabilities(),
                    controllers=[self.controller()],
                    connection=connection,
                    transport=self.link,
                    registry=prometheus_client.CollectorRegistry(),
                    identity=self.identity,
                    rng=rng,
                    task_status=task_status,
                )
        finally:
            self.stopped_at = trio.current_time()
            self.stopped.set()

    @property
    def running(self) -> Serving:
        if self.serving is None:
            raise RuntimeError(f"replica {self.identity} has not started")
        return self.serving

    def crash(self) -> None:
        """Die without a word: no request gets out any more, and the scope is cancelled."""
        self.link.kill()
        self.scope.cancel()


@dataclass(frozen=True)
class Env:
    """What every replica of the run shares."""

    server: ApiServer
    connection: ConnectionConfig
    settings: Settings
    verify: ssl.SSLContext | bool  # for the transport: httpx ignores a client's `verify` then
    rng: random.Random
    guard_s: float

    @property
    def lease_duration_s(self) -> float:
        return self.settings.leader_elect_lease_duration_s

    @property
    def retry_period_s(self) -> float:
        return self.settings.leader_elect_retry_period_s


async def start_replica(nursery: trio.Nursery, env: Env, identity: str) -> Replica:
    """Start a replica in `nursery`; returns once serve() has reported started."""
    replica = Replica(identity, Link(httpx.AsyncHTTPTransport(verify=env.verify)))
    replica.serving = await nursery.start(
        partial(replica.run, env.settings, env.connection, random.Random(env.rng.random()))
    )
    return replica


async def wait_for(what: str, env: Env, wait: Callable[[], Awaitable[None]]) -> None:
    """`await wait()`, bounded so that a bug (no takeover) fails loudly instead of hanging."""
    with trio.move_on_after(env.guard_s) as scope:
        await wait()
    if scope.cancelled_caught:
        raise RuntimeError(f"{what}: not within {env.guard_s:g} s; is election broken?")


async def wait_warm(env: Env, replica: Replica) -> None:
    """Until the replica's caches are synced and it has read the Lease at least once."""
    endpoints = replica.running.endpoints
    checks = [c for c in (endpoints.readyz if endpoints else ()) if c.name == "informer-sync"]

    def warm() -> bool:
        return all(c.probe() is None for c in checks) and bool(replica.link.lease_calls)

    with trio.move_on_after(env.guard_s) as scope:
        # Outside serve(), the caches are visible only through the readyz check: poll it.
        while not warm():  # noqa: ASYNC110 - no event to wait for
            await trio.sleep(POLL_S)
    if scope.cancelled_caught:
        raise RuntimeError(f"replica {replica.identity}: caches not synced in {env.guard_s:g} s")


async def settle(env: Env) -> None:
    """A random 2-4 retry periods: the failure lands at a random phase of the timers."""
    await trio.sleep(env.rng.uniform(2 * env.retry_period_s, 4 * env.retry_period_s))


def lease_holder(env: Env) -> str:
    return str(env.server.get(*LEASE)["spec"].get("holderIdentity") or "")


# -- one failover of each kind ----------------------------------------------------------------
@dataclass(frozen=True)
class Crash:
    """From the kill to the standby's probe starting, and its parts."""

    takeover_s: float
    lease_kept: bool  # the dead leader's Lease still named it after it stopped
    renewed_s: float | None  # the leader's last renewal, before the kill
    seen_s: float  # when the standby first read the record it took over (- : before the kill)
    slot_s: float  # from that sighting + leaseDurationSeconds to the standby's acquire
    start_s: float  # from the acquire to the probe starting
    lease_seconds: int


@dataclass(frozen=True)
class Graceful:
    """From shut_down() to the standby's probe starting, and its parts."""

    takeover_s: float
    released: bool  # the leader wrote an empty holder
    release_s: float  # from shut_down() to the release written
    slot_s: float  # from the release to the standby's acquire
    start_s: float  # from the acquire to the probe starting
    stopped_s: float  # from shut_down() to serve() returning


async def crash(
    nursery: trio.Nursery, env: Env, leader: Replica, name: str, *, cold: bool
) -> tuple[Crash, Replica]:
    """Kill `leader`; a standby (warm, or with `cold` started at the kill) takes over."""
    standby: Replica | None = None
    if not cold:
        standby = await start_replica(nursery, env, name)
        await wait_warm(env, standby)
    await settle(env)
    killed_at = trio.current_time()
    leader.crash()
    if standby is None:
        standby = await start_replica(nursery, env, name)
    await wait_for(f"{leader.identity} stopping", env, leader.stopped.wait)
    lease_kept = lease_holder(env) == leader.identity
    await wait_for(f"{standby.identity} taking over", env, standby.probe_started.wait)
    probe_at = standby.probe_starts[0]
    acquire = standby.link.acquired(standby.identity, killed_at)
    if acquire is None:
        raise RuntimeError(f"{standby.identity} runs its controllers but never wrote the Lease")
    # The record taken over is the one the standby read last before acquiring; it judged it
    # expired leaseDurationSeconds after it first read it.
    reads = [
        c
        for c in standby.link.lease_calls
        if c.method == "GET" and c.status == 200 and c.ended <= acquire.started
    ]
    if not reads:
        raise RuntimeError(f"{standby.identity} took the Lease over without reading it")
    final = reads[-1].renew_time
    seen_at = min(c.ended for c in reads if c.renew_time == final)
    lease_seconds = max(1, int(env.lease_duration_s))
    renewal = [
        c
        for c in leader.link.lease_calls
        if c.method in ("PUT", "POST") and c.renew_time == final and c.status < 300
    ]
    result = Crash(
        takeover_s=probe_at - killed_at,
        lease_kept=lease_kept,
        renewed_s=renewal[0].ended - killed_at if renewal else None,
        seen_s=seen_at - killed_at,
        slot_s=acquire.ended - (seen_at + lease_seconds),
        start_s=probe_at - acquire.ended,
        lease_seconds=lease_seconds,
    )
    return result, standby


async def graceful(
    nursery: trio.Nursery, env: Env, leader: Replica, name: str, *, cold: bool
) -> tuple[Graceful, Replica]:
    """Shut `leader` down; a standby (warm, or with `cold` started then) takes over."""
    standby: Replica | None = None
    if not cold:
        standby = await start_replica(nursery, env, name)
        await wait_warm(env, standby)
    await settle(env)
    shut_at = trio.current_time()
    leader.running.shut_down()
    if standby is None:
        standby = await start_replica(nursery, env, name)
    await wait_for(f"{standby.identity} taking over", env, standby.probe_started.wait)
    probe_at = standby.probe_starts[0]
    await wait_for(f"{leader.identity} returning from serve()", env, leader.stopped.wait)
    release = next(
        (
            c
            for c in leader.link.lease_calls
            if c.started >= shut_at and c.method == "PUT" and c.holder == ""
        ),
        None,
    )
    acquire = standby.link.acquired(standby.identity, shut_at)
    if acquire is None:
        raise RuntimeError(f"{standby.identity} runs its controllers but never wrote the Lease")
    released = release is not None and release.status == 200
    release_at = release.ended if release is not None else shut_at
    result = Graceful(
        takeover_s=probe_at - shut_at,
        released=released,
        release_s=release_at - shut_at,
        slot_s=acquire.ended - release_at,
        start_s=probe_at - acquire.ended,
        stopped_s=leader.stopped_at - shut_at,
    )
    return result, standby


@dataclass(frozen=True)
class Round:
    crash: Crash
    graceful: Graceful


async def run_round(nursery: trio.Nursery, env: Env, label: str, *, cold: bool) -> Round:
    """A leads; crash it (B takes over); shut B down (C takes over); stop C."""
    a = await start_replica(nursery, env, f"{label}-a")
    await wait_for(f"{a.identity} leading", env, a.running.wait_leading)
    crashed, b = await crash(nursery, env, a, f"{label}-b", cold=cold)
    shut, c = await graceful(nursery, env, b, f"{label}-c", cold=cold)
    c.scope.cancel()  # cancelled by its embedder: releases the Lease for the next round
    await wait_for(f"{c.identity} stopping", env, c.stopped.wait)
    if lease_holder(env):
        raise RuntimeError(f"{c.identity} was cancelled but the Lease still names it")
    return Round(crashed, shut)


# -- what the timers alone predict -------------------------------------------------------------
MODEL_DRAWS: Final = 50_000


def model(
    lease_s: float, retry_s: float, goal_crash_s: float, rng: random.Random
) -> dict[str, float]:
    """The takeover times client-go's timers alone give (no request or start-up cost): what
    a standby that only polls (a Go CCM, or trio-ccm before its Lease watch) would show.

    The leader renews every retry period and dies 0 to 1 period after its last renewal (at
    0); the standby attempts every retry period x [1, 1 + jitter), at a random phase. After a
    crash it takes over at its first attempt at least leaseDurationSeconds after its first
    attempt since that renewal (when it first read it); after a graceful shutdown, at its
    first attempt after the release.
    """
    lease = max(1, int(lease_s))  # what the Lease carries, and what the standby goes by
    longest = retry_s * (1 + JITTER_FACTOR)

    def period() -> float:
        return retry_s * (1.0 + rng.random() * JITTER_FACTOR)

    def first_attempt_from(instant: float) -> float:
        t = instant - 6 * longest - rng.uniform(0, longest)  # a random, settled phase
        while t < instant:
            t += period()
        return t

    crashes: list[float] = []
    gracefuls: list[float] = []
    for _ in range(MODEL_DRAWS):
        killed = rng.uniform(0, retry_s)
        t = seen = first_attempt_from(0.0)
        while t < seen + lease:
            t += period()
        crashes.append(t - killed)
        gracefuls.append(first_attempt_from(0.0))
    deciles = statistics.quantiles(crashes, n=10)
    return {
        "model_crash_takeover_s": round(statistics.median(crashes), 2),
        "model_crash_p10_s": round(deciles[0], 2),
        "model_crash_p90_s": round(deciles[-1], 2),
        "model_crash_within_goal": round(sum(x <= goal_crash_s for x in crashes) / MODEL_DRAWS, 3),
        "model_graceful_takeover_s": round(statistics.median(gracefuls), 2),
        "model_graceful_within_goal": round(
            sum(x <= GOAL_GRACEFUL_S for x in gracefuls) / MODEL_DRAWS, 3
        ),
    }


# -- reporting --------------------------------------------------------------------------------
def describe_crash(label: str, r: Crash) -> str:
    renewed = f"{-r.renewed_s:.2f} s before" if r.renewed_s is not None else "(not seen) before"
    return (
        f"  {label:<10} crash    {r.takeover_s:6.2f} s   leader last renewed {renewed} the "
        f"kill; standby first read that record at {r.seen_s:+.2f} s, so it expired at "
        f"{r.seen_s + r.lease_seconds:+.2f} s; acquired {r.slot_s:.2f} s after that (its next "
        f"attempt); probe {r.start_s * 1000:.0f} ms later; Lease kept by the dead leader: "
        f"{'yes' if r.lease_kept else 'NO'}"
    )


def describe_graceful(label: str, r: Graceful) -> str:
    return (
        f"  {label:<10} graceful {r.takeover_s:6.2f} s   release written "
        f"{r.release_s * 1000:.0f} ms after shut_down() ({'ok' if r.released else 'FAILED'}); "
        f"standby acquired {r.slot_s:.2f} s after that (its next attempt); probe "
        f"{r.start_s * 1000:.0f} ms later; serve() returned after {r.stopped_s:.2f} s"
    )


def spread(prefix: str, values: list[float]) -> dict[str, float]:
    return {
        prefix: round(statistics.median(values), 3),
        f"{prefix}_min": round(min(values), 3),
        f"{prefix}_max": round(max(values), 3),
    }


# -- main -------------------------------------------------------------------------------------
@asynccontextmanager
async def open_env(
    nursery: trio.Nursery, args: argparse.Namespace, settings: Settings
) -> AsyncIterator[Env]:
    server = ApiServer(seed=args.seed)
    for i in range(args.nodes):
        server.create(make_node(i))
    listening = await nursery.start(partial(serve_apiserver, server, tls=args.tls))
    connection = ConnectionConfig(
        server=listening.url,
        credentials=StaticCredentials(token="bench"),  # noqa: S106 - the emulator accepts any
        ca_pem=listening.ca_pem,
        source="bench/failover.py emulator",
    )
    # A transport given to httpx ignores `verify`: the TLS context goes to the transport.
    context = connection.ssl_context(await connection.credentials.get())
    guard_s = 2 * settings.leader_elect_lease_duration_s + 20 * settings.leader_elect_retry_period_s
    yield Env(
        server,
        connection,
        settings,
        context if context is not None else True,
        random.Random(args.seed),
        guard_s + 30,
    )


async def bench(args: argparse.Namespace, settings: Settings) -> dict[str, list[Round]]:
    results: dict[str, list[Round]] = {"warm": [], "cold": []}
    async with trio.open_nursery() as nursery, open_env(nursery, args, settings) as env:
        variants = [False, True] if args.cold else [False]
        for index in range(args.rounds):
            for cold in variants:
                label = f"round {index + 1}" + (" cold" if cold else "")
                result = await run_round(
                    nursery, env, f"r{index + 1}{'c' if cold else 'w'}", cold=cold
                )
                results["cold" if cold else "warm"].append(result)
                print(describe_crash(label, result.crash))
                print(describe_graceful(label, result.graceful))
                sys.stdout.flush()
        nursery.cancel_scope.cancel()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round, lease 4 s / 3 s / 1 s")
    parser.add_argument("--rounds", type=int, help="rounds (default 3; quick 1)")
    parser.add_argument("--lease-duration", type=float, help="seconds (default 15; quick 4)")
    parser.add_argument("--renew-deadline", type=float, help="seconds (default 10; quick 3)")
    parser.add_argument("--retry-period", type=float, help="seconds (default 2; quick 1)")
    parser.add_argument("--nodes", type=int, help="Nodes in the cluster (default 1000; quick 100)")
    parser.add_argument("--tls", action="store_true", help="HTTPS instead of plain HTTP")
    parser.add_argument("--cold", action="store_true", help="also standbys started at the failure")
    parser.add_argument(
        "--seed", type=int, help="for the delays and the replicas' jitter (default: random)"
    )
    parser.add_argument("--log-level", default="critical", help="trio-ccm's logs, to stderr")
    args = parser.parse_args(argv)
    quick = args.quick
    if args.seed is None:
        args.seed = random.randrange(2**32)  # fresh phases each run; printed to repeat them
    args.rounds = args.rounds or (1 if quick else 3)
    args.nodes = args.nodes if args.nodes is not None else (100 if quick else 1_000)
    lease_s = args.lease_duration or (4.0 if quick else 15.0)
    renew_s = args.renew_deadline or (3.0 if quick else 10.0)
    retry_s = args.retry_period or (1.0 if quick else 2.0)
    validate_timing(lease_s, renew_s, retry_s)
    settings = Settings(
        secure_port=0,
        leader_elect_lease_duration_s=lease_s,
        leader_elect_renew_deadline_s=renew_s,
        leader_elect_retry_period_s=retry_s,
    )
    quiet_logging(args.log_level)
    goal_crash_s = lease_s + 1.0

    print(
        f"Leader failover over {'HTTPS' if args.tls else 'HTTP'} on loopback, one process; "
        f"lease {lease_s:g} s / renew deadline {renew_s:g} s / retry period {retry_s:g} s "
        f"(attempts every {retry_s:g}-{retry_s * (1 + JITTER_FACTOR):g} s); {args.nodes} Nodes; "
        f"{args.rounds} rounds; seed {args.seed}; times from the failure to the new leader's "
        "probe controller starting"
    )
    began = time.perf_counter()
    results = trio.run(bench, args, settings)
    total_s = time.perf_counter() - began

    warm = results["warm"]
    crash_s = [r.crash.takeover_s for r in warm]
    graceful_s = [r.graceful.takeover_s for r in warm]
    figures: dict[str, Any] = {
        **spread("crash_takeover_s", crash_s),
        **spread("graceful_takeover_s", graceful_s),
        "crash_rounds_s": [round(x, 3) for x in crash_s],
        "graceful_rounds_s": [round(x, 3) for x in graceful_s],
        "goal_crash_s": goal_crash_s,
        "goal_graceful_s": GOAL_GRACEFUL_S,
        "lease_duration_s": lease_s,
        "renew_deadline_s": renew_s,
        "retry_period_s": retry_s,
        "rounds": args.rounds,
        "lease_kept_after_crash": all(r.crash.lease_kept for r in warm),
        "lease_released_on_shutdown": all(r.graceful.released for r in warm),
    }
    for label, values, goal in (
        ("crash", crash_s, goal_crash_s),
        ("graceful", graceful_s, GOAL_GRACEFUL_S),
    ):
        met = sum(x <= goal for x in values)
        print(
            f"{label:>8}: median {statistics.median(values):.2f} s, min {min(values):.2f}, "
            f"max {max(values):.2f}; goal <= {goal:g} s met in {met} of {len(values)} rounds"
        )
    if results["cold"]:
        cold = results["cold"]
        cold_crash = [r.crash.takeover_s for r in cold]
        cold_graceful = [r.graceful.takeover_s for r in cold]
        figures.update(spread("cold_crash_takeover_s", cold_crash))
        figures.update(spread("cold_graceful_takeover_s", cold_graceful))
        print(
            f"    cold: crash median {statistics.median(cold_crash):.2f} s, graceful median "
            f"{statistics.median(cold_graceful):.2f} s (standby started at the failure)"
        )
    predicted = model(lease_s, retry_s, goal_crash_s, random.Random(args.seed))
    figures.update(predicted)
    print(
        f"   client-go model (polling only, no Lease watch; {MODEL_DRAWS:,} draws): crash median "
        f"{predicted['model_crash_takeover_s']:.2f} s (10-90% "
        f"{predicted['model_crash_p10_s']:.2f}-{predicted['model_crash_p90_s']:.2f} s, "
        f"{predicted['model_crash_within_goal']:.0%} within the goal) and a graceful median "
        f"of {predicted['model_graceful_takeover_s']:.2f} s "
        f"({predicted['model_graceful_within_goal']:.0%} within the goal)"
    )
    print(f"total {total_s:.1f} s")
    figures.update(
        {
            "nodes": args.nodes,
            "tls": args.tls,
            "quick": quick,
            "seed": args.seed,
            "total_s": round(total_s, 1),
            "python": platform.python_version(),
        }
    )
    sys.stdout.flush()
    print_figures(figures)


if __name__ == "__main__":
    main()
