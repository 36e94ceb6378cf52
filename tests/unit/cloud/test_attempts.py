"""Attempts: the attempt loop of the real-cloud clients, driven by a scripted attempt.

Everything runs under `MockClock(autojump_threshold=0)` (`autojump_clock`), so the backoffs
are exact virtual seconds, drawn from a seeded `random.Random`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
import trio
import trio.testing

from trio_ccm.cloud import fence
from trio_ccm.cloud.attempts import BACKOFF_BASE_S, BACKOFF_CAP_S, Attempts, Resend, Retry, explain
from trio_ccm.errors import NotLeadingError

LIMIT_S = 100  # virtual fail_after bound of every test
SEED = 7


class TransientError(Exception):
    """A transient failure an attempt reports with Retry."""


class FinalError(Exception):
    """A failure an attempt raises as it is."""


class Script:
    """An attempt that plays `steps` in order: "ok", "retry", "final", "resend",
    "resend-counted"; it records the virtual time of each call."""

    def __init__(self, attempts: Attempts, steps: Sequence[str]) -> None:
        self.attempts = attempts
        self.steps = list(steps)
        self.times: list[float] = []

    async def __call__(self) -> str:
        self.attempts.leaving("svc:Action")
        self.times.append(trio.current_time())
        step = self.steps.pop(0)
        if step == "retry":
            cause = OSError("connection refused")
            raise Retry(TransientError(f"attempt {len(self.times)}")) from cause
        if step == "final":
            raise FinalError("refused")
        if step == "resend":
            raise Resend(counted=False)
        if step == "resend-counted":
            raise Resend(counted=True)
        return "answer"


def delays(count: int) -> list[float]:
    """The first `count` backoffs the loop draws with the seeded rng."""
    rng = random.Random(SEED)
    return [
        rng.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt)) for attempt in range(count)
    ]


def instants(start: float, gaps: Sequence[float]) -> list[float]:
    found = [start]
    for gap in gaps:
        found.append(found[-1] + gap)
    return found


async def test_transient_failures_back_off_then_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two Retry signals are sent again after capped exponential backoffs with full jitter
    (the seeded draws, to the virtual instant), and the third attempt's answer is returned."""
    attempts = Attempts(cloud="test", max_attempts=3, rng=random.Random(SEED))
    script = Script(attempts, ["retry", "retry", "ok"])
    with trio.fail_after(LIMIT_S):
        assert await attempts.run(script) == "answer"
    assert script.times == pytest.approx(instants(0.0, delays(2)))
    assert (attempts.retries, attempts.calls["svc:Action"]) == (2, 3)


async def test_spent_attempts_raise_the_error_with_its_cause(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """When every attempt failed transiently, the last Retry's error is raised, chained to
    what caused it, after max_attempts calls."""
    attempts = Attempts(cloud="test", max_attempts=2, rng=random.Random(SEED))
    script = Script(attempts, ["retry", "retry"])
    with trio.fail_after(LIMIT_S), pytest.raises(TransientError, match="attempt 2") as caught:
        await attempts.run(script)
    assert isinstance(caught.value.__cause__, OSError)
    assert len(script.times) == 2


@pytest.mark.parametrize(
    ("steps", "calls", "outcome"),
    [
        pytest.param(["final", "ok"], 1, FinalError, id="final-at-once"),
        pytest.param(["resend", "retry", "retry", "ok"], 4, "answer", id="resend-not-counted"),
        pytest.param(
            ["resend-counted", "retry", "retry", "ok"], 3, TransientError, id="resend-counted"
        ),
        pytest.param(["retry", "retry", "resend-counted", "ok"], 4, "answer", id="resend-at-last"),
    ],
)
async def test_what_each_signal_costs(
    autojump_clock: trio.testing.MockClock,
    steps: list[str],
    calls: int,
    outcome: object,
) -> None:
    """With max_attempts=3: an error that is no signal is raised at once; a Resend not
    counted spends no attempt (OpenStack's re-auth), a counted one does (AWS's token
    refresh) yet is sent even as the last attempt's successor."""
    attempts = Attempts(cloud="test", max_attempts=3, rng=random.Random(SEED))
    script = Script(attempts, steps)
    with trio.fail_after(LIMIT_S):
        if isinstance(outcome, type):
            with pytest.raises(outcome):
                await attempts.run(script)
        else:
            assert await attempts.run(script) == outcome
    assert len(script.times) == calls


async def test_the_fence_refuses_before_the_count(autojump_clock: trio.testing.MockClock) -> None:
    """leaving() runs the leadership fence first: a replica past its Lease sends nothing
    and counts nothing, and the refusal is not retried."""

    def refuse() -> None:
        raise NotLeadingError("the Lease is gone")

    attempts = Attempts(cloud="test", max_attempts=3, rng=random.Random(SEED))
    script = Script(attempts, ["retry", "ok"])
    with trio.fail_after(LIMIT_S), fence.guarding(refuse), pytest.raises(NotLeadingError):
        await attempts.run(script)
    assert (script.times, dict(attempts.calls), attempts.retries) == ([], {}, 0)


def test_explain_names_the_chain() -> None:
    """explain() gives each exception of the cause chain with its type, three at most."""
    inner = OSError("refused")
    outer = ConnectionError()
    outer.__cause__ = inner
    assert explain(outer) == "ConnectionError <- OSError: refused"
    deep = RuntimeError("a")
    deep.__cause__ = outer
    assert explain(deep) == "RuntimeError: a <- ConnectionError <- OSError: refused"
    top = ValueError("b")
    top.__cause__ = deep
    assert explain(top).count(" <- ") == 2
