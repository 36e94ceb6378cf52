"""The leadership referee: a cloud write counts only inside its replica's leadership."""

from __future__ import annotations

from typing import Any

import pytest

from trio_ccm.testing.referee import (
    CloudWrite,
    LeaseWrite,
    cloud_writes_of_log,
    leadership_windows,
    lease_write_of,
    violations,
)

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


def _lease(holder: str, renew: str | None, version: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"holderIdentity": holder, "leaseDurationSeconds": 4}
    if renew is not None:
        spec["renewTime"] = renew
    return {
        "metadata": {"name": "cloud-controller-manager", "resourceVersion": str(version)},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("lease", "expected"),
    [
        pytest.param(
            _lease("host_1234", "1970-01-01T00:00:10.250000Z", 7),
            LeaseWrite(10.25, "r0-1", "r0-1", 7),
            id="renewal-renamed",
        ),
        pytest.param(
            _lease("host_9", "1970-01-01T00:00:03Z", 8),
            LeaseWrite(3.0, "host_9", "host_9", 8),
            id="unknown-identity-kept",
        ),
        pytest.param(
            _lease("", "1970-01-01T00:00:11.000001Z", 9),
            LeaseWrite(11.000001, "", "", 9),
            id="release",
        ),
        pytest.param(_lease("host_1234", None, 1), None, id="no-renew-time"),
    ],
)
def test_a_lease_state_is_read_as_the_write_that_made_it(
    lease: dict[str, Any], expected: LeaseWrite | None
) -> None:
    """A Lease as a watch delivers it is the write stamped at its renewTime, ordered by its
    resourceVersion, by the holder it names under the name the call log knows it by."""
    found = lease_write_of(lease, identities={"host_1234": "r0-1"})
    if expected is None:
        assert found is None
    else:
        assert found is not None
        assert (found.replica, found.holder, found.version) == (
            expected.replica,
            expected.holder,
            expected.version,
        )
        assert found.at == pytest.approx(expected.at, abs=1e-6)


def test_a_lease_with_a_bad_renew_time_is_an_error_quoting_it() -> None:
    """A renewTime that is not an RFC 3339 UTC time is refused with the value quoted."""
    with pytest.raises(ValueError, match="'yesterday' is not an RFC 3339"):
        lease_write_of(_lease("a", "yesterday", 1))


def test_the_call_log_gives_the_mutating_calls_by_wall_time() -> None:
    """Only mutating calls count, dated by the wall clock at arrival, by their replica."""
    log = [
        {
            "time": 1.0,
            "wall": 100.0,
            "replica": "r0-1",
            "method": "GetLoadBalancer",
            "target": "k/a",
            "status": 200,
        },
        {
            "time": 2.0,
            "wall": 101.5,
            "replica": "r0-1",
            "method": "PutLoadBalancer",
            "target": "k/a",
            "status": 500,
        },
        {
            "time": 3.0,
            "wall": 102.0,
            "replica": "",
            "method": "CreateRoute",
            "target": "k",
            "status": 201,
        },
    ]
    assert cloud_writes_of_log(log) == [  # type: ignore[arg-type]
        CloudWrite(101.5, "r0-1", "PutLoadBalancer", "k/a"),
        CloudWrite(102.0, "", "CreateRoute", "k"),
    ]
    assert [w.at for w in cloud_writes_of_log(log, clock="time")] == [2.0, 3.0]  # type: ignore[arg-type]


def test_watched_history_and_call_log_feed_the_referee() -> None:
    """Records read over HTTP judge as the in-process ones do: a write after the takeover by
    a replica whose Lease was taken over is a violation."""
    ids = {"h_a": A, "h_b": B}
    history = [
        lease_write_of(_lease("h_a", "1970-01-01T00:00:01Z", 1), identities=ids),
        lease_write_of(_lease("h_b", "1970-01-01T00:00:06Z", 2), identities=ids),
    ]
    log = [
        {"wall": 2.0, "replica": A, "method": "PutLoadBalancer", "target": "k/x"},
        {"wall": 6.5, "replica": A, "method": "DeleteRoute", "target": "k/r"},
        {"wall": 6.5, "replica": B, "method": "CreateRoute", "target": "k/r"},
    ]
    found = violations(
        [w for w in history if w is not None],
        cloud_writes_of_log(log),  # type: ignore[arg-type]
        lease_duration_s=LEASE_S,
    )
    assert [(v.write.replica, v.write.method) for v in found] == [(A, "DeleteRoute")]
