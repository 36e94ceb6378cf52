"""Per-key exponential backoff: exact sequences, jitter bounds, RetryAfter, presets."""

from __future__ import annotations

import math
import random
import sys

import pytest

from trio_ccm.actors.backoff import (
    NODE_RETRY_BASE_S,
    NODE_RETRY_CAP_S,
    ROUTE_RECONCILIATION_PERIOD_S,
    SERVICE_RETRY_BASE_S,
    SERVICE_RETRY_CAP_S,
    Backoff,
    node_backoff,
    retry_after_s,
    route_backoff,
    service_backoff,
)
from trio_ccm.errors import RetryAfter


@pytest.mark.parametrize(
    ("backoff", "expected"),
    [
        pytest.param(
            service_backoff(jitter=0.0),
            [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0],
            id="service-5s-to-300s",
        ),
        pytest.param(
            node_backoff(jitter=0.0),
            [0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64],
            id="node-5ms-start",
        ),
        pytest.param(route_backoff(), [10.0, 10.0, 10.0], id="route-constant-10s"),
        pytest.param(Backoff(1.0, 100.0, factor=3.0, jitter=0.0), [1, 3, 9, 27, 81, 100], id="f3"),
        pytest.param(Backoff(2.0, 50.0, factor=1.0, jitter=0.0), [2.0, 2.0, 2.0], id="flat"),
    ],
)
def test_delays_grow_exponentially_to_the_cap(backoff: Backoff, expected: list[float]) -> None:
    """Without jitter the n-th failure waits min(cap, base * factor ** (n - 1))."""
    assert [backoff.next_delay("k") for _ in expected] == pytest.approx(expected, rel=1e-12)
    assert backoff.failures("k") == len(expected)


def test_node_preset_reaches_its_cap_of_1000s() -> None:
    """The workqueue default reaches 1000 s after 19 failures (5 ms * 2^18 = 1310.72 s)."""
    backoff = node_backoff(jitter=0.0)
    delays = [backoff.next_delay("n") for _ in range(20)]
    assert delays[17] == pytest.approx(655.36)
    assert delays[18:] == [1000.0, 1000.0]


def test_preset_constants_are_upstreams() -> None:
    """The named constants hold the upstream figures (DESIGN, upstream-ccm.md §2.1, §2.3, §2.4)."""
    assert (SERVICE_RETRY_BASE_S, SERVICE_RETRY_CAP_S) == (5.0, 300.0)
    assert (NODE_RETRY_BASE_S, NODE_RETRY_CAP_S) == (0.005, 1000.0)
    assert ROUTE_RECONCILIATION_PERIOD_S == 10.0


def test_keys_back_off_independently() -> None:
    """Each key has its own failure count."""
    backoff = Backoff(1.0, 60.0, jitter=0.0)
    assert [backoff.next_delay("a"), backoff.next_delay("a"), backoff.next_delay("b")] == [
        1.0,
        2.0,
        1.0,
    ]
    assert (backoff.failures("a"), backoff.failures("b"), backoff.failures("c")) == (2, 1, 0)
    assert len(backoff) == 2


def test_reset_starts_over_and_drops_the_key() -> None:
    """reset() after a success makes the next failure wait base_s again and frees the key."""
    backoff = Backoff(5.0, 300.0, jitter=0.0)
    backoff.next_delay("k")
    backoff.next_delay("k")
    backoff.reset("k")
    backoff.reset("never-failed")
    assert len(backoff) == 0
    assert backoff.next_delay("k") == 5.0


@pytest.mark.parametrize("jitter", [pytest.param(0.1, id="10pc"), pytest.param(0.5, id="50pc")])
def test_jitter_only_shortens_within_its_fraction(jitter: float) -> None:
    """A jittered delay lies in [d * (1 - jitter), d] and the cap is never exceeded."""
    backoff = Backoff(5.0, 300.0, jitter=jitter, rng=random.Random(7))
    for failure in range(1, 40):
        delay = backoff.next_delay("k")
        nominal = min(300.0, 5.0 * 2 ** (failure - 1))
        assert nominal * (1 - jitter) <= delay <= nominal


def test_jitter_is_deterministic_for_a_seeded_rng() -> None:
    """Two backoffs with equally seeded rngs produce the same delays, and they do vary."""
    first = Backoff(5.0, 300.0, rng=random.Random(3))
    second = Backoff(5.0, 300.0, rng=random.Random(3))
    a = [first.next_delay(i) for i in range(20)]
    assert a == [second.next_delay(i) for i in range(20)]
    assert len(set(a)) > 1


def test_huge_failure_counts_stay_at_the_cap() -> None:
    """Thousands of failures neither overflow nor exceed the cap."""
    backoff = Backoff(0.001, 1e6, factor=10.0, jitter=0.0)
    delays = [backoff.next_delay("k") for _ in range(5000)]
    assert delays[-1] == 1e6
    assert max(delays) == 1e6


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        pytest.param(RetryAfter(7.5), 7.5, id="retry-after"),
        pytest.param(RetryAfter(0), 0.0, id="zero"),
        pytest.param(RetryAfter(-3), 0.0, id="negative-is-zero"),
        pytest.param(RetryAfter(math.nan), 0.0, id="nan-is-zero"),
        pytest.param(ExceptionGroup("g", [RetryAfter(2), RetryAfter(9)]), 9.0, id="group-max"),
        pytest.param(
            ExceptionGroup("g", [RetryAfter(2), ExceptionGroup("h", [RetryAfter(4)])]),
            4.0,
            id="nested-group",
        ),
        pytest.param(ExceptionGroup("g", [RetryAfter(2), ValueError()]), None, id="mixed-group"),
        pytest.param(ValueError("boom"), None, id="ordinary-error"),
    ],
)
def test_retry_after_s_classifies(exc: BaseException, expected: float | None) -> None:
    """RetryAfter (or a group of only RetryAfters) asks for a fixed delay; anything else not."""
    assert retry_after_s(exc) == expected


def test_retry_after_wins_and_leaves_the_count_alone() -> None:
    """delay_for returns exactly RetryAfter's delay without growing or resetting the count."""
    backoff = Backoff(5.0, 300.0, jitter=0.5, rng=random.Random(1))
    plain = Backoff(5.0, 300.0, jitter=0.0)
    assert plain.delay_for("k", RuntimeError()) == 5.0
    assert plain.delay_for("k", RetryAfter(1.25)) == 1.25
    assert plain.failures("k") == 1
    assert plain.delay_for("k", RuntimeError()) == 10.0
    assert backoff.delay_for("k", RetryAfter(42.0)) == 42.0  # exact even with jitter
    assert backoff.failures("k") == 0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        pytest.param({"base_s": 0.0, "cap_s": 1.0}, "0 < base_s <= cap_s", id="zero-base"),
        pytest.param({"base_s": 5.0, "cap_s": 1.0}, "0 < base_s <= cap_s", id="cap-below-base"),
        pytest.param({"base_s": 1.0, "cap_s": math.inf}, "cap_s < inf", id="infinite-cap"),
        pytest.param({"base_s": 1.0, "cap_s": 2.0, "factor": 0.5}, "factor >= 1", id="factor"),
        pytest.param({"base_s": 1.0, "cap_s": 2.0, "jitter": 1.5}, "[0, 1]", id="jitter"),
    ],
)
def test_invalid_parameters_are_refused(kwargs: dict[str, float], fragment: str) -> None:
    """Nonsense parameters raise ValueError naming the constraint."""
    with pytest.raises(ValueError, match=fragment.replace("[", r"\[")):
        Backoff(**kwargs)  # type: ignore[arg-type]


def test_a_wave_of_failing_keys_gives_its_table_back() -> None:
    """Once 5,000 keys that failed together have all succeeded, the failure table is small
    again; counting starts afresh for a key that fails later."""
    backoff = Backoff(1.0, 10.0, jitter=0.0)
    for i in range(5000):
        backoff.next_delay(i)
    wave = sys.getsizeof(backoff._failures)
    for i in range(5000):
        backoff.reset(i)
    assert len(backoff) == 0
    assert sys.getsizeof(backoff._failures) < wave / 100
    assert backoff.next_delay(7) == 1.0
