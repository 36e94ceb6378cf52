"""MetadataBatcher: concurrent per-Node lookups coalesced into bulk calls, and sweeps.

Everything runs under `MockClock(autojump_threshold=0)` (`autojump_clock`), so times are
exact virtual seconds: "the batch was sent at t=0.02".
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence

import pytest
import trio
import trio.testing

from trio_ccm.cloud.batching import BatcherStatistics, MetadataBatcher
from trio_ccm.cloud.budget import CloudBudget, Rate
from trio_ccm.cloud.provider import (
    BulkInstances,
    InstanceMetadata,
    InstanceNotFoundError,
    Instances,
    LoadBalancers,
    NodeInfo,
    Routes,
    ThrottledError,
    bulk_instances,
)
from trio_ccm.errors import NotLeadingError

LIMIT_S = 1000  # virtual fail_after bound of every test


def node(name: str) -> NodeInfo:
    return NodeInfo(name=name)


def meta(name: str) -> InstanceMetadata:
    return InstanceMetadata(provider_id=f"sim:///zone-a/{name}")


class FakeBulk:
    """A provider's bulk lookup: records (start time, names asked), sleeps, fails on script."""

    def __init__(self, *, latency_s: float = 0.0, missing: frozenset[str] = frozenset()) -> None:
        self.latency_s = latency_s
        self.missing = missing
        self.calls: list[tuple[float, list[str]]] = []
        self.finished: list[float] = []
        self.errors: list[BaseException] = []

    async def instances_metadata(self, nodes: Sequence[NodeInfo]) -> Mapping[str, InstanceMetadata]:
        self.calls.append((trio.current_time(), [n.name for n in nodes]))
        await trio.sleep(self.latency_s)
        self.finished.append(trio.current_time())
        if self.errors:
            raise self.errors.pop(0)
        return {n.name: meta(n.name) for n in nodes if n.name not in self.missing}

    def sizes(self) -> list[int]:
        return [len(names) for _, names in self.calls]


class BulkOnlyInstances(FakeBulk):
    """Instances whose per-Node methods must not be called: only the bulk lookup is."""

    async def instance_metadata(self, node: NodeInfo) -> InstanceMetadata | None:
        raise AssertionError("the batcher uses the bulk lookup only")

    async def instance_exists(self, node: NodeInfo) -> bool:
        raise AssertionError("unused")

    async def instance_shutdown(self, node: NodeInfo) -> bool:
        raise AssertionError("unused")


class BulkProvider:
    name = "fake"
    load_balancers: LoadBalancers | None = None
    routes: Routes | None = None

    def __init__(self) -> None:
        self.instances: Instances | None = BulkOnlyInstances()

    async def initialize(self) -> None:
        await trio.lowlevel.checkpoint()


class Lookups:
    """Runs lookups at given times; records each outcome and the time it arrived."""

    def __init__(self, batcher: MetadataBatcher) -> None:
        self.batcher = batcher
        self.answers: dict[str, tuple[float, InstanceMetadata]] = {}
        self.errors: dict[str, tuple[float, BaseException, int]] = {}
        self.cancelled: list[str] = []

    async def one(self, name: str, at: float = 0.0, cancel_at: float = float("inf")) -> None:
        await trio.sleep_until(at)
        with trio.CancelScope(deadline=cancel_at) as scope:
            try:
                found = await self.batcher.instance_metadata(node(name))
            except Exception as exc:  # recorded for the test to assert on
                depth = len(list(traceback.walk_tb(exc.__traceback__)))
                self.errors[name] = (trio.current_time(), exc, depth)
            else:
                self.answers[name] = (trio.current_time(), found)
        if scope.cancelled_caught:
            self.cancelled.append(name)

    async def run(self, plan: Sequence[tuple[str, float] | tuple[str, float, float]]) -> None:
        async with trio.open_nursery() as nursery:
            for item in plan:
                nursery.start_soon(self.one, *item)


async def test_concurrent_lookups_share_one_bulk_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """50 lookups at t=0 make one bulk call at t=0.02 (the window), all answered when it returns."""
    bulk = FakeBulk(latency_s=0.1)
    lookups = Lookups(MetadataBatcher(bulk))
    names = [f"node-{i}" for i in range(50)]
    with trio.fail_after(LIMIT_S):
        await lookups.run([(name, 0.0) for name in names])
    assert len(bulk.calls) == 1
    assert bulk.calls[0][0] == 0.02
    assert sorted(bulk.calls[0][1]) == sorted(names)
    assert {name: found for name, (_, found) in lookups.answers.items()} == {
        name: meta(name) for name in names
    }
    assert [t for t, _ in lookups.answers.values()] == pytest.approx([0.12] * 50)
    assert lookups.batcher.statistics() == BatcherStatistics(
        batches=1, nodes=50, largest=50, pending=0
    )


async def test_full_batches_go_at_once(autojump_clock: trio.testing.MockClock) -> None:
    """450 lookups with max_batch=200: two full batches at t=0, the remaining 50 at t=0.02."""
    bulk = FakeBulk()
    lookups = Lookups(MetadataBatcher(bulk, max_batch=200))
    names = [f"node-{i}" for i in range(450)]
    with trio.fail_after(LIMIT_S):
        await lookups.run([(name, 0.0) for name in names])
    assert [(t, len(asked)) for t, asked in bulk.calls] == [(0.0, 200), (0.0, 200), (0.02, 50)]
    assert sorted(n for _, asked in bulk.calls for n in asked) == sorted(names)
    assert len(lookups.answers) == 450
    assert lookups.batcher.statistics() == BatcherStatistics(
        batches=3, nodes=450, largest=200, pending=0
    )


@pytest.mark.parametrize(
    ("window_s", "latency_s", "plan", "calls"),
    [
        pytest.param(
            0.02,
            0.0,
            [("a", 0.0), ("b", 0.01), ("c", 0.03)],
            [(0.02, ["a", "b"]), (0.05, ["c"])],
            id="window-counts-from-the-first-lookup",
        ),
        pytest.param(
            0.02,
            0.1,
            [("a", 0.0), ("b", 0.05), ("c", 0.06)],
            [(0.02, ["a"]), (0.07, ["b", "c"])],
            id="lookups-during-a-call-start-the-next-batch",
        ),
        pytest.param(
            0.5,
            0.0,
            [("a", 0.0), ("b", 0.3), ("c", 0.6)],
            [(0.5, ["a", "b"]), (1.1, ["c"])],
            id="longer-window",
        ),
    ],
)
async def test_window_timing(
    autojump_clock: trio.testing.MockClock,
    window_s: float,
    latency_s: float,
    plan: list[tuple[str, float]],
    calls: list[tuple[float, list[str]]],
) -> None:
    """A batch is sent window_s after its first lookup and takes every lookup until then."""
    bulk = FakeBulk(latency_s=latency_s)
    lookups = Lookups(MetadataBatcher(bulk, window_s=window_s))
    with trio.fail_after(LIMIT_S):
        await lookups.run(plan)
    assert [t for t, _ in bulk.calls] == pytest.approx([t for t, _ in calls])
    assert [sorted(asked) for _, asked in bulk.calls] == [asked for _, asked in calls]
    assert sorted(lookups.answers) == sorted(name for name, _ in plan)


@pytest.mark.parametrize(
    ("plan", "calls"),
    [
        pytest.param(
            [(f"n{i:02d}", i * 0.01) for i in range(50)],
            [(0.015, 2), (0.215, 20), (0.415, 20), (0.615, 8)],
            id="a-stream-of-lookups-gathers-into-a-call-per-spacing",
        ),
        pytest.param(
            [("a", 0.0), ("b", 1.0)],
            [(0.015, 1), (1.015, 1)],
            id="a-lookup-after-a-quiet-spell-waits-only-its-window",
        ),
        pytest.param(
            [("a", 0.0), ("b", 0.1)],
            [(0.015, 1), (0.215, 1)],
            id="a-lookup-soon-after-a-call-waits-for-the-spacing",
        ),
    ],
)
async def test_spacing_gathers_a_stream_of_lookups(
    autojump_clock: trio.testing.MockClock,
    plan: list[tuple[str, float]],
    calls: list[tuple[float, int]],
) -> None:
    """With spacing_s=0.2, bulk calls start at least 0.2 s apart; a lone lookup is not delayed."""
    bulk = FakeBulk()
    lookups = Lookups(MetadataBatcher(bulk, window_s=0.015, spacing_s=0.2))
    with trio.fail_after(LIMIT_S):
        await lookups.run(plan)
    assert [t for t, _ in bulk.calls] == pytest.approx([t for t, _ in calls])
    assert [len(asked) for _, asked in bulk.calls] == [n for _, n in calls]
    assert sorted(lookups.answers) == sorted(name for name, _ in plan)


async def test_missing_node_is_instance_not_found(autojump_clock: trio.testing.MockClock) -> None:
    """A Node absent from the bulk answer raises InstanceNotFoundError naming it; others succeed."""
    bulk = FakeBulk(missing=frozenset({"node-b"}))
    lookups = Lookups(MetadataBatcher(bulk))
    with trio.fail_after(LIMIT_S):
        await lookups.run([("node-a", 0.0), ("node-b", 0.0), ("node-c", 0.0)])
    assert len(bulk.calls) == 1
    assert sorted(lookups.answers) == ["node-a", "node-c"]
    _, error, _ = lookups.errors["node-b"]
    assert isinstance(error, InstanceNotFoundError)
    assert "Node node-b" in str(error)


async def test_bulk_error_reaches_every_waiter(autojump_clock: trio.testing.MockClock) -> None:
    """Every waiter of a failed batch raises the bulk call's exception; tracebacks do not grow."""
    bulk = FakeBulk()
    error = ThrottledError("RequestLimitExceeded", retry_after_s=3.0)
    bulk.errors.append(error)
    lookups = Lookups(MetadataBatcher(bulk))
    names = [f"node-{i}" for i in range(20)]
    with trio.fail_after(LIMIT_S):
        await lookups.run([(name, 0.0) for name in names])
        assert len(lookups.errors) == 20
        assert all(exc is error for _, exc, _ in lookups.errors.values())
        assert error.retry_after_s == 3.0
        depths = {depth for _, _, depth in lookups.errors.values()}
        assert len(depths) == 1  # the same frames in every waiter, none piled up
        await lookups.one("node-0", at=1.0)  # the next batch works
    assert lookups.answers["node-0"] == (1.02, meta("node-0"))
    assert lookups.batcher.statistics().pending == 0


@pytest.mark.parametrize(
    ("latency_s", "cancel", "calls", "answered_at"),
    [
        pytest.param(0.0, ("b", 0.01), [(0.02, ["a", "c"])], 0.02, id="waiter-during-the-window"),
        pytest.param(0.0, ("a", 0.01), [(0.02, ["b", "c"])], 0.02, id="driver-during-the-window"),
        pytest.param(
            0.1,
            ("a", 0.05),
            [(0.02, ["a", "b", "c"]), (0.05, ["b", "c"])],
            0.15,
            id="driver-during-the-call",
        ),
        pytest.param(
            0.1, ("b", 0.05), [(0.02, ["a", "b", "c"])], 0.12, id="waiter-during-the-call"
        ),
    ],
)
async def test_cancelled_waiter_does_not_break_the_batch(
    autojump_clock: trio.testing.MockClock,
    latency_s: float,
    cancel: tuple[str, float],
    calls: list[tuple[float, list[str]]],
    answered_at: float,
) -> None:
    """A cancelled lookup (even the one sending the batch) leaves the others their answers."""
    bulk = FakeBulk(latency_s=latency_s)
    lookups = Lookups(MetadataBatcher(bulk))
    cancelled, cancel_at = cancel
    plan = [("a", 0.0), ("b", 0.001), ("c", 0.002)]  # "a" arrives first: it drives the batch
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            for name, at in plan:
                deadline = cancel_at if name == cancelled else float("inf")
                nursery.start_soon(lookups.one, name, at, deadline)
    assert lookups.cancelled == [cancelled]
    assert [t for t, _ in bulk.calls] == pytest.approx([t for t, _ in calls])
    assert [sorted(asked) for _, asked in bulk.calls] == [asked for _, asked in calls]
    others = sorted({"a", "b", "c"} - {cancelled})
    assert {name: lookups.answers[name][0] for name in others} == {
        name: pytest.approx(answered_at) for name in others
    }
    assert not lookups.errors
    assert lookups.batcher.statistics().pending == 0


async def test_all_waiters_cancelled_leaves_nothing_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """When every lookup of a batch is cancelled no call is made; the next lookup starts afresh."""
    bulk = FakeBulk()
    lookups = Lookups(MetadataBatcher(bulk))
    with trio.fail_after(LIMIT_S):
        await lookups.run([("a", 0.0, 0.01), ("b", 0.0, 0.01)])
        assert bulk.calls == []
        assert lookups.batcher.statistics() == BatcherStatistics(0, 0, 0, 0)
        await lookups.one("c", at=1.0)
    assert bulk.calls == [(1.02, ["c"])]
    assert sorted(lookups.cancelled) == ["a", "b"]


async def test_duplicate_names_are_asked_once(autojump_clock: trio.testing.MockClock) -> None:
    """Five lookups of one Node in a batch send it once and all get the answer."""
    bulk = FakeBulk()
    batcher = MetadataBatcher(bulk)
    results: list[InstanceMetadata] = []

    async def lookup(name: str) -> None:
        results.append(await batcher.instance_metadata(node(name)))

    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            for name in ["a"] * 5 + ["b"]:
                nursery.start_soon(lookup, name)
            await trio.sleep(0.01)
            assert batcher.statistics().pending == 6
    assert [sorted(asked) for _, asked in bulk.calls] == [["a", "b"]]
    assert sorted(r.provider_id for r in results) == sorted(
        [meta("a").provider_id] * 5 + [meta("b").provider_id]
    )
    assert batcher.statistics() == BatcherStatistics(batches=1, nodes=2, largest=2, pending=0)


@pytest.mark.parametrize(
    ("count", "max_batch", "sizes"),
    [
        pytest.param(450, 200, [200, 200, 50], id="three-chunks"),
        pytest.param(200, 200, [200], id="exactly-one-chunk"),
        pytest.param(5, 2, [2, 2, 1], id="small-chunks"),
        pytest.param(0, 200, [], id="no-nodes"),
    ],
)
async def test_all_metadata_chunks_by_max_batch(
    autojump_clock: trio.testing.MockClock, count: int, max_batch: int, sizes: list[int]
) -> None:
    """A sweep makes one bulk call per max_batch distinct Nodes, in turn, and merges answers."""
    bulk = FakeBulk(latency_s=0.1, missing=frozenset({"node-3"}))
    batcher = MetadataBatcher(bulk, max_batch=max_batch)
    nodes = [node(f"node-{i}") for i in range(count)]
    with trio.fail_after(LIMIT_S):
        answer = await batcher.all_metadata(nodes + nodes[:3])  # duplicates are asked once
    assert bulk.sizes() == sizes
    assert [t for t, _ in bulk.calls] == pytest.approx([0.1 * i for i in range(len(sizes))])
    expected = {n.name: meta(n.name) for n in nodes if n.name != "node-3"}
    assert answer == expected
    assert batcher.statistics() == BatcherStatistics(
        batches=len(sizes), nodes=count, largest=max(sizes, default=0), pending=0
    )


async def test_all_metadata_propagates_bulk_errors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A failing chunk's exception reaches the sweep's caller as is."""
    bulk = FakeBulk()
    bulk.errors.append(RuntimeError("DescribeInstances failed"))
    with trio.fail_after(LIMIT_S), pytest.raises(RuntimeError, match="DescribeInstances"):
        await MetadataBatcher(bulk).all_metadata([node("a")])


async def test_batches_through_the_budget_take_one_token_each(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Batching a budgeted provider's bulk lookup spends one instances token per batch."""

    budget = CloudBudget()
    provider = budget.wrap(BulkProvider())
    assert provider.instances is not None
    bulk = bulk_instances(provider.instances)
    assert isinstance(bulk, BulkInstances)
    lookups = Lookups(MetadataBatcher(bulk))
    with trio.fail_after(LIMIT_S):
        await lookups.run([(f"node-{i}", 0.0) for i in range(50)])
    assert len(lookups.answers) == 50
    assert budget.statistics()["instances"].tokens == 29.0


async def test_a_batch_keeps_filling_while_its_call_waits_for_a_token(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With one instances token a second, lookups arriving while a batch's call waits for
    its token join that batch: a lookup every 0.1 s for 3 s makes four calls (at t=0.02,
    1.02, 2.02, 3.02), not one per 20 ms window."""
    budget = CloudBudget({"instances": Rate(1.0, 1)})
    fake = BulkProvider()
    provider = budget.wrap(fake)
    assert provider.instances is not None
    bulk = bulk_instances(provider.instances)
    assert isinstance(bulk, BulkInstances)
    lookups = Lookups(MetadataBatcher(bulk, max_batch=25))
    plan = [(f"node-{i}", round(i * 0.1, 1)) for i in range(31)]
    with trio.fail_after(LIMIT_S):
        await lookups.run(plan)
    assert isinstance(fake.instances, BulkOnlyInstances)
    recorded = fake.instances.calls
    assert [t for t, _ in recorded] == pytest.approx([0.02, 1.02, 2.02, 3.02])
    assert [len(names) for _, names in recorded] == [1, 10, 10, 10]
    assert len(lookups.answers) == 31
    assert lookups.batcher.statistics().batches == 4


@pytest.mark.parametrize(
    "refusal",
    [
        pytest.param(NotLeadingError("the Lease is no longer held"), id="not-leading"),
        pytest.param(ThrottledError("slow down", retry_after_s=0.5), id="throttled"),
    ],
)
async def test_a_call_refused_before_it_reads_its_batch_does_not_poison_later_ones(
    autojump_clock: trio.testing.MockClock, refusal: Exception
) -> None:
    """A bulk call refused before the provider reads its batch (the budget's leadership
    guard, say, after a lost Lease) fails that batch's lookups only: a lookup made later
    (the next term's) starts a new batch and is answered, rather than joining the failed
    one forever."""
    refusals = [refusal]

    def guard() -> None:
        if refusals:
            raise refusals.pop()

    budget = CloudBudget(guard=guard)
    fake = BulkProvider()
    provider = budget.wrap(fake)
    assert provider.instances is not None
    bulk = bulk_instances(provider.instances)
    assert isinstance(bulk, BulkInstances)
    lookups = Lookups(MetadataBatcher(bulk))
    with trio.fail_after(LIMIT_S):
        await lookups.run([("node-0", 0.0), ("node-1", 0.0)])
        assert {name: exc for name, (_, exc, _) in lookups.errors.items()} == {
            "node-0": refusal,
            "node-1": refusal,
        }
        await lookups.run([("node-1", 1.0), ("node-2", 1.0)])
    assert isinstance(fake.instances, BulkOnlyInstances)
    assert [sorted(names) for _, names in fake.instances.calls] == [["node-1", "node-2"]]
    assert sorted(lookups.answers) == ["node-1", "node-2"]
    assert lookups.batcher.statistics().pending == 0


@pytest.mark.parametrize(
    ("window_s", "max_batch"),
    [
        pytest.param(-0.1, 200, id="negative-window"),
        pytest.param(float("nan"), 200, id="nan-window"),
        pytest.param(0.02, 0, id="zero-batch"),
    ],
)
def test_batcher_rejects_nonsense(window_s: float, max_batch: int) -> None:
    """A window must be >= 0 and a batch hold at least one Node."""
    with pytest.raises(ValueError, match="MetadataBatcher:"):
        MetadataBatcher(FakeBulk(), window_s=window_s, max_batch=max_batch)
