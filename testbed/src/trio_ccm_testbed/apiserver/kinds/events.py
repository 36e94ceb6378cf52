"""events.k8s.io/v1 Event: a second representation of the stored core/v1 Events.

Objects are stored in the core form; `event_to_v1`/`event_from_v1` convert at the door, so a
watch on either group sees every Event.
"""

from __future__ import annotations

from trio_ccm_testbed.apiserver import fielderrors as fe
from trio_ccm_testbed.apiserver.fielderrors import FieldError
from trio_ccm_testbed.apiserver.kinds.base import (
    Obj,
    ResourceType,
)
from trio_ccm_testbed.apiserver.kinds.core import EventStrategy

# events.k8s.io/v1 is a second representation of the same stored core/v1 Events.
_EVENTS_V1_RENAMES = (
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("related", "related"),
    ("action", "action"),
    ("reason", "reason"),
    ("type", "type"),
    ("eventTime", "eventTime"),
    ("reportingInstance", "reportingInstance"),
)


def event_to_v1(obj: Obj) -> Obj:
    out: Obj = {"kind": "Event", "apiVersion": "events.k8s.io/v1", "metadata": obj["metadata"]}
    for core, v1 in _EVENTS_V1_RENAMES:
        if core in obj:
            out[v1] = obj[core]
    series = obj.get("series")
    if isinstance(series, dict):
        out["series"] = {
            "count": series.get("count", 0),
            "lastObservedTime": series.get("lastObservedTime"),
        }
    return out


def event_from_v1(obj: Obj) -> Obj:
    out: Obj = {"kind": "Event", "apiVersion": "v1", "metadata": obj.get("metadata") or {}}
    for core, v1 in _EVENTS_V1_RENAMES:
        if v1 in obj:
            out[core] = obj[v1]
    series = obj.get("series")
    if isinstance(series, dict):
        out["series"] = dict(series)
    return out


class EventV1Strategy(EventStrategy):
    """Validation runs on the core form (the stored one)."""

    def validate(self, obj: Obj) -> list[FieldError]:
        errs = super().validate(obj)
        if not obj.get("eventTime"):
            errs.append(fe.required("eventTime"))
        if not obj.get("reportingComponent"):
            errs.append(fe.required("reportingController"))
        return errs


def types() -> list[ResourceType]:
    """events.k8s.io/v1 events."""
    return [
        ResourceType(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            "event",
            True,
            EventV1Strategy(),
            short_names=("ev",),
            storage="/v1/events",
            to_external=event_to_v1,
            from_external=event_from_v1,
            printer="event",
        ),
    ]
