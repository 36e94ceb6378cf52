"""Keyed actors: memory per idle child and notifications/s through mailbox -> child.

    python bench/actors.py [--quick]

memory: a `KeyedActors` with a no-op handler, a CapacityLimiter of 10 and an idle timeout
of a day (so no child exits) serves a `Mailbox`. `tracemalloc` starts after the manager is
serving and the keys (`default/service-000001` ...) exist, as an informer's cache would
already hold them; then one value per key is put, and once every child has handled it and
is parked idle, the garbage collector runs and a snapshot is taken. Everything still
allocated is what the alive children cost (Trio tasks, their coroutine frames, contexts
with the structlog binding, the per-key records, the manager's dict, the nursery's task
set): that total / actors = `bytes_per_actor`. The marginal bytes per actor between a tenth
of the actors and all of them, and the growth of the process's RSS (a separate run, no
tracemalloc) are printed as cross-checks.

notifications/s: with every child alive and idle, each round puts one new value for every
key (a burst, as a relist of changed objects gives), and the clock runs until the handler
has seen all of them; the figure is the median of the rounds' rates (values handled / wall
time). Each notification is a put, the dispatcher's hand-off, a child's wake-up, the
limiter, the shielded handler call (which yields once, as any real handler awaits
something) and the child parking again. `notifications_per_s` uses a limiter of 10,
`unlimited_notifications_per_s` one of a token per actor, `saturated_notifications_per_s`
one of 1, so that every child but one queues on the limiter.
`spawn_notifications_per_s` is the first round with a limiter of 10, which also spawns
every child.

wave: N new keys at once (100,000; quick 4,000) into a `KeyedActors` whose limiter has
2,000 tokens (the cloud-node controller's with `--cloud-batch-size=1000`, as
`bench/scale.py` runs it) and whose handler calls all wait until released, as a wave's
lookups and writes wait on the cloud and the API: once the dispatcher is idle, the children
alive, `tracemalloc`'s traced bytes, the objects the garbage collector tracks, and how long
a full collection takes (`wave_*`). Then every call is released and the clock runs until
all N are handled (`wave_handled_s`).

One process, one thread, one `trio.run` per phase. Prints a summary, then one JSON object
as the last line. Benchmarks print numbers; they never assert on time.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import trio
import trio.testing

from _common import print_figures, quiet_logging
from trio_ccm.actors.backoff import service_backoff
from trio_ccm.actors.keyed import KeyedActors
from trio_ccm.base.mailbox import Mailbox

LIMIT = 10  # --concurrent-service-syncs of a busy cluster
DAY_S = 86_400.0
PHASE_TIMEOUT_S = 600.0


def key_names(count: int) -> list[str]:
    return [f"default/service-{i:06d}" for i in range(count)]


class Counting:
    """A handler that yields once (as any real one awaits something), counts its calls and
    wakes whoever waits for a target count."""

    def __init__(self) -> None:
        self.calls = 0
        self.target = 0
        self.reached = trio.Event()
        self.in_flight = 0
        self.max_in_flight = 0

    def expect(self, calls: int) -> trio.Event:
        self.target = calls
        self.reached = trio.Event()
        if self.calls >= calls:
            self.reached.set()
        return self.reached

    async def __call__(self, key: str, value: object) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await trio.lowlevel.checkpoint()
        self.in_flight -= 1
        self.calls += 1
        if self.calls >= self.target:
            self.reached.set()


def manager(handler: Counting, limit: int = LIMIT) -> KeyedActors[str, object]:
    return KeyedActors(
        "bench-controller",
        handler,
        limiter=trio.CapacityLimiter(limit),
        backoff=service_backoff(),
        idle_timeout_s=DAY_S,
    )


async def all_idle(actors: KeyedActors[str, object], count: int) -> None:
    while actors.statistics().idle < count:
        await trio.testing.wait_all_tasks_blocked()


# -- memory ------------------------------------------------------------------------------
async def memory_phase(count: int) -> dict[str, Any]:
    keys = key_names(count)
    value = object()
    handler = Counting()
    actors = manager(handler)
    mailbox: Mailbox[str, object] = Mailbox()
    async with trio.open_nursery() as nursery:
        await nursery.start(actors.serve, mailbox)
        # Warm up once-per-process costs (code objects, structlog's contextvars) on a key
        # that then leaves.
        mailbox.put("warm-up", value)
        await all_idle(actors, 1)
        gc.collect()
        tracemalloc.start()
        began = time.perf_counter()
        with trio.fail_after(PHASE_TIMEOUT_S):
            for key in keys:
                mailbox.put(key, value)
            await handler.expect(count + 1).wait()
            await all_idle(actors, count + 1)
        spawn_s = time.perf_counter() - began
        gc.collect()
        snapshot = tracemalloc.take_snapshot()
        tracemalloc.stop()
        stats = actors.statistics()
        nursery.cancel_scope.cancel()
    snapshot = snapshot.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    by_line = snapshot.statistics("lineno")
    traced = sum(stat.size for stat in by_line)
    top = [
        (f"{s.traceback[0].filename.rsplit('/', 2)[-1]}:{s.traceback[0].lineno}", s.size)
        for s in by_line[:5]
    ]
    return {
        "actors": count,
        "alive": stats.alive - 1,
        "traced_bytes": traced,
        "bytes_per_actor": traced / count,
        "top": top,
        "spawn_s": spawn_s,
    }


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def rss_phase(count: int) -> dict[str, Any]:
    keys = key_names(count)
    value = object()
    handler = Counting()
    actors = manager(handler)
    mailbox: Mailbox[str, object] = Mailbox()
    async with trio.open_nursery() as nursery:
        await nursery.start(actors.serve, mailbox)
        mailbox.put("warm-up", value)
        await all_idle(actors, 1)
        gc.collect()
        before = rss_bytes()
        with trio.fail_after(PHASE_TIMEOUT_S):
            for key in keys:
                mailbox.put(key, value)
            await all_idle(actors, count + 1)
        gc.collect()
        after = rss_bytes()
        nursery.cancel_scope.cancel()
    return {"actors": count, "rss_bytes_per_actor": (after - before) / count}


# -- notifications/s ---------------------------------------------------------------------
async def rate_phase(count: int, rounds: int, limit: int) -> dict[str, Any]:
    keys = key_names(count)
    handler = Counting()
    actors = manager(handler, limit)
    mailbox: Mailbox[str, object] = Mailbox()
    rates: list[float] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(actors.serve, mailbox)
        with trio.fail_after(PHASE_TIMEOUT_S):
            for round_ in range(rounds + 1):
                await all_idle(actors, count if round_ else 0)
                reached = handler.expect(count * (round_ + 1))
                began = time.perf_counter()
                for key in keys:
                    mailbox.put(key, round_)
                await reached.wait()
                rates.append(count / (time.perf_counter() - began))
        stats = actors.statistics()
        nursery.cancel_scope.cancel()
    return {
        "actors": count,
        "rounds": rounds,
        "spawn_notifications_per_s": rates[0],
        "notifications_per_s": statistics.median(rates[1:]),
        "round_rates": rates[1:],
        "handled": stats.handled,
        "spawned": stats.spawned,
        "coalesced": stats.coalesced,
        "max_in_flight": handler.max_in_flight,
    }


# -- the mailbox alone ---------------------------------------------------------------------
def mailbox_phase(keys: int, steady: int) -> dict[str, float]:
    """Drain a mailbox of `keys` pending keys (a subscription's first fill, at 100,000 Nodes),
    then `steady` put/get pairs one key at a time on the same, now empty, mailbox (heartbeats
    after the fill). Synchronous: the mailbox's own cost, no scheduler."""
    mailbox: Mailbox[str, int] = Mailbox()
    names = key_names(keys)
    for i, name in enumerate(names):
        mailbox.put(name, i)
    t0 = time.perf_counter()
    while len(mailbox):
        mailbox.get_nowait()
    drain_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(steady):
        mailbox.put(names[i % keys], i)
        mailbox.get_nowait()
    pair_s = (time.perf_counter() - t0) / steady
    return {"drain_ms": drain_s * 1e3, "pair_us": pair_s * 1e6}


# -- a wave of new keys ----------------------------------------------------------------------
WAVE_TOKENS = 2_000


async def wave_phase(count: int) -> dict[str, Any]:
    release = trio.Event()
    all_handled = trio.Event()
    handled = 0

    async def handler(key: str, value: object) -> None:
        nonlocal handled
        await release.wait()
        handled += 1
        if handled == count:
            all_handled.set()

    actors: KeyedActors[str, object] = KeyedActors(
        "bench-wave",
        handler,
        limiter=trio.CapacityLimiter(WAVE_TOKENS),
        backoff=service_backoff(),
        idle_timeout_s=0.0,
    )
    mailbox: Mailbox[str, object] = Mailbox()
    keys = [f"node-{i:06d}" for i in range(count)]
    gc.collect()
    tracked_before = len(gc.get_objects())
    tracemalloc.start()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(actors.serve, mailbox)
            for key in keys:
                mailbox.put(key, key)
            await trio.testing.wait_all_tasks_blocked()
            traced = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            tracked = len(gc.get_objects()) - tracked_before
            stats = actors.statistics()
            started = time.perf_counter()
            gc.collect()
            collection_s = time.perf_counter() - started
            started = time.perf_counter()
            release.set()
            await all_handled.wait()
            handled_s = time.perf_counter() - started
            nursery.cancel_scope.cancel()
    finally:
        if tracemalloc.is_tracing():
            tracemalloc.stop()
    return {
        "keys": count,
        "alive": stats.alive,
        "waiting": stats.waiting,
        "queued": getattr(stats, "queued", 0),
        "traced_bytes": traced,
        "tracked": tracked,
        "collection_s": collection_s,
        "handled_s": handled_s,
    }


# -- main --------------------------------------------------------------------------------
def run(phase: Callable[..., Any], *args: Any) -> dict[str, Any]:
    result: dict[str, Any] = trio.run(phase, *args)
    gc.collect()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (smoke check)")
    parser.add_argument("--actors", type=int, help="keyed actors alive (default 10000; quick 1000)")
    parser.add_argument("--rounds", type=int, help="notification rounds (default 10; quick 3)")
    args = parser.parse_args(argv)
    count = args.actors or (1_000 if args.quick else 10_000)
    rounds = args.rounds or (3 if args.quick else 10)
    quiet_logging("warning")

    print(
        f"Keyed actors, one process, one thread; {count:,} actors, limiter {LIMIT}, "
        f"{rounds} rounds of {count:,} notifications"
    )
    began = time.perf_counter()
    rss = run(rss_phase, count)  # first: later phases leave freed memory for reuse
    small = run(memory_phase, max(1, count // 10))
    memory = run(memory_phase, count)
    marginal = (memory["traced_bytes"] - small["traced_bytes"]) / (count - small["actors"])
    print(
        f"  memory   {count:>6} actors: {memory['bytes_per_actor']:7,.0f} B/actor traced "
        f"({memory['traced_bytes'] / 1e6:.1f} MB; {small['actors']:,} actors "
        f"{small['bytes_per_actor']:,.0f} B/actor; marginal {marginal:,.0f} B/actor; "
        f"RSS growth {rss['rss_bytes_per_actor']:,.0f} B/actor)"
    )
    print("           largest: " + ", ".join(f"{k} {v / count:,.0f}" for k, v in memory["top"]))
    rate = run(rate_phase, count, rounds, LIMIT)
    free = run(rate_phase, count, rounds, count)
    saturated = run(rate_phase, count, rounds, 1)
    for label, r in ((f"limiter {LIMIT}", rate), ("no limit", free), ("limiter 1", saturated)):
        each = " / ".join(f"{x:,.0f}" for x in r["round_rates"])
        print(
            f"  rate     {count:>6} actors, {label:>10}: {r['notifications_per_s']:9,.0f} "
            f"notifications/s median (rounds {each}); first round, spawning every child: "
            f"{r['spawn_notifications_per_s']:,.0f}/s; handled {r['handled']:,}, "
            f"at most {r['max_in_flight']} calls in flight"
        )
    drained = mailbox_phase(10_000 if args.quick else 100_000, 20_000)
    print(
        f"  mailbox  drain of {10_000 if args.quick else 100_000:,} pending keys "
        f"{drained['drain_ms']:,.1f} ms; then a put and a get {drained['pair_us']:.2f} µs"
    )
    wave_keys = 4_000 if args.quick else 100_000
    wave = run(wave_phase, wave_keys)
    print(
        f"  wave     {wave_keys:,} new keys, {WAVE_TOKENS:,} tokens, every call waiting: "
        f"{wave['alive']:,} children alive ({wave['waiting']:,} waiting, {wave['queued']:,} "
        f"queued as values), {wave['traced_bytes'] / 1e6:.1f} MB traced, "
        f"{wave['tracked']:,} more tracked objects, a full collection "
        f"{wave['collection_s'] * 1e3:,.0f} ms; all handled {wave['handled_s']:.1f} s after "
        "release"
    )
    total_s = time.perf_counter() - began
    print(f"total {total_s:.1f} s")
    figures = {
        "bytes_per_actor": round(memory["bytes_per_actor"], 1),
        "marginal_bytes_per_actor": round(marginal, 1),
        "rss_bytes_per_actor": round(rss["rss_bytes_per_actor"], 1),
        "notifications_per_s": round(rate["notifications_per_s"], 1),
        "spawn_notifications_per_s": round(rate["spawn_notifications_per_s"], 1),
        "unlimited_notifications_per_s": round(free["notifications_per_s"], 1),
        "saturated_notifications_per_s": round(saturated["notifications_per_s"], 1),
        "mailbox_drain_100k_ms": None if args.quick else round(drained["drain_ms"], 2),
        "mailbox_put_get_us": round(drained["pair_us"], 3),
        "wave_keys": wave_keys,
        "wave_alive": wave["alive"],
        "wave_traced_mb": round(wave["traced_bytes"] / 1e6, 1),
        "wave_tracked": wave["tracked"],
        "wave_collection_ms": round(wave["collection_s"] * 1e3, 1),
        "wave_handled_s": round(wave["handled_s"], 2),
        "actors": count,
        "rounds": rounds,
        "limiter": LIMIT,
        "quick": args.quick,
        "total_s": round(total_s, 1),
        "python": platform.python_version(),
    }
    sys.stdout.flush()
    print_figures(figures)


if __name__ == "__main__":
    main()
