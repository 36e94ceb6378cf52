"""The leadership referee: a cloud write counts only inside its replica's leadership."""

from __future__ import annotations

import pytest

from trio_ccm.testing.referee import CloudWrite, LeaseWrite, leadership_windows, violations

A, B = "ccm-a", "ccm-b"
LEASE_S = 4.0
HISTORY = [
    LeaseWrite(0.0, A, A, 1),  # a acquires
    LeaseWrite(1.0, A, A, 2),  # renews
    LeaseWrite(2.0, A, A, 3),  # renews, then stops (crash)
    LeaseWrite(6.0, B, B, 4),  # b takes over after the lease duration
    LeaseWrite(7.0, B, "", 5),  # b releases
    LeaseWrite(7.0, A, A, 6),  # a acquires at the same instant, after the release
]


def test_windows_follow_renewals_takeovers_and_releases() -> None:
    """Each acquire or renewal opens a window of one lease duration, cut short by the next
    write naming another holder (a takeover or a release)."""
    assert leadership_windows(HISTORY, lease_duration_s=LEASE_S) == {
        A: [(0.0, 4.0), (1.0, 5.0), (2.0, 6.0), (7.0, 11.0)],
        B: [(6.0, 7.0)],
    }


@pytest.mark.parametrize(
    ("write", "reason"),
    [
        pytest.param(CloudWrite(5.5, A, "PUT"), None, id="inside-a-renewal"),
        pytest.param(CloudWrite(6.5, A, "PUT"), "its leadership ended at 6.000", id="after-expiry"),
        pytest.param(CloudWrite(6.5, B, "PUT"), None, id="the-new-leader"),
        pytest.param(
            CloudWrite(7.5, B, "PUT"), "its leadership ended at 7.000", id="after-release"
        ),
        pytest.param(CloudWrite(-1.0, A, "PUT"), "it never led before", id="before-any"),
        pytest.param(CloudWrite(8.0, A, "PUT"), None, id="after-reacquiring"),
    ],
)
def test_a_write_is_judged_by_its_replicas_windows(write: CloudWrite, reason: str | None) -> None:
    """A write inside one of its replica's windows passes; outside, it is a violation
    saying when that leadership ended."""
    found = violations(HISTORY, [write], lease_duration_s=LEASE_S)
    assert [v.reason for v in found] == ([] if reason is None else [reason])


def test_sequence_numbers_order_writes_of_one_instant() -> None:
    """Made at the same instant, a cloud write that left before the release is inside; one
    that left after it is not."""
    history = [LeaseWrite(0.0, A, A, 1, seq=1), LeaseWrite(3.0, A, "", 2, seq=5)]
    before = CloudWrite(3.0, A, "PUT", seq=4)
    after = CloudWrite(3.0, A, "PUT", seq=6)
    assert [v.write for v in violations(history, [before, after], lease_duration_s=LEASE_S)] == [
        after
    ]
