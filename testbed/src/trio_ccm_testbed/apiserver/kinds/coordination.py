"""coordination.k8s.io/v1 Lease."""

from __future__ import annotations

from trio_ccm_testbed.apiserver import fielderrors as fe
from trio_ccm_testbed.apiserver.fielderrors import FieldError
from trio_ccm_testbed.apiserver.kinds.base import (
    Obj,
    ResourceType,
    Strategy,
    is_int,
)


class LeaseStrategy(Strategy):
    def validate(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        spec = obj.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and (not is_int(duration) or duration <= 0):
            errs.append(fe.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
        transitions = spec.get("leaseTransitions")
        if transitions is not None and (not is_int(transitions) or transitions < 0):
            errs.append(
                fe.invalid(
                    "spec.leaseTransitions", transitions, "must be greater than or equal to 0"
                )
            )
        return errs


def types() -> list[ResourceType]:
    """coordination.k8s.io/v1 leases."""
    return [
        ResourceType(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            "lease",
            True,
            LeaseStrategy(),
            printer="lease",
        ),
    ]
