"""The OpenStack routes' coalescer: route changes of one pass go out in one Neutron call.

Under `MockClock(autojump_threshold=0)` (`autojump_clock`), so "together" is exact: changes
submitted within `BATCH_WINDOW_S` of the first share its call, later ones make the next.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_ccm.cloud.openstack.routes import BATCH_WINDOW_S, _Coalescer


@pytest.mark.parametrize(
    ("delays_s", "calls"),
    [
        pytest.param([0.0, 0.0, 0.0], [["a", "b", "c"]], id="one-pass-one-call"),
        pytest.param(
            [0.0, BATCH_WINDOW_S / 2, 2 * BATCH_WINDOW_S],
            [["a", "b"], ["c"]],
            id="a-late-change-makes-the-next-call",
        ),
    ],
)
async def test_changes_submitted_together_share_one_call(
    autojump_clock: trio.testing.MockClock, delays_s: list[float], calls: list[list[str]]
) -> None:
    """Changes submitted within the window of the first are sent in its call; one
    submitted after that call went out waits for a call of its own."""
    sent: list[list[str]] = []

    async def send(items: list[dict[str, str]]) -> None:
        sent.append(sorted(item["destination"] for item in items))  # trio starts tasks in any order
        await trio.sleep(1.0)  # Neutron's answer

    coalescer = _Coalescer(send)

    async def submit(name: str, delay_s: float) -> None:
        await trio.sleep(delay_s)
        await coalescer.submit({"destination": name, "nexthop": "10.0.0.1"})

    async with trio.open_nursery() as nursery:
        for name, delay_s in zip("abc", delays_s, strict=True):
            nursery.start_soon(submit, name, delay_s)
    assert sent == calls


async def test_a_failed_call_fails_every_change_it_carried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Every change that rode on a failed call sees its error (each is retried by its
    own route controller pass), not only the one that sent it."""

    async def send(items: list[dict[str, str]]) -> None:
        raise RuntimeError(f"409 for {len(items)} routes")

    coalescer = _Coalescer(send)
    errors: list[str] = []

    async def submit(name: str) -> None:
        try:
            await coalescer.submit({"destination": name, "nexthop": "10.0.0.1"})
        except RuntimeError as exc:
            errors.append(f"{name}: {exc}")

    async with trio.open_nursery() as nursery:
        for name in "ab":
            nursery.start_soon(submit, name)
    assert sorted(errors) == ["a: 409 for 2 routes", "b: 409 for 2 routes"]
