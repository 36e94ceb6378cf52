"""What every kind shares: `ResourceType` (names, scope, verbs), `Strategy`, `ReviewType`.

A strategy holds what upstream keeps in `pkg/registry/<group>/<kind>/strategy.go` and
`pkg/apis/<group>/validation`: defaults, validation on create and update, which part of
the object the main endpoint and the status subresource may change, and allocation.

Contracts: a strategy's hooks never touch the store; `defaults` runs on create and on every
update, before validation; `allocate` is all-or-nothing (it releases what it took when it
reports errors), and `release(obj, keep)` gives back only what `keep` no longer holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeGuard

from trio_ccm_testbed.apiserver import fielderrors as fe
from trio_ccm_testbed.apiserver.fielderrors import FieldError
from trio_ccm_testbed.apiserver.patch import MergeList

Obj = dict[str, Any]

READ_WRITE = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
STATUS_VERBS = ("get", "patch", "update")


class Strategy:
    """Generic behaviour; kinds override what differs."""

    status_subresource = False
    track_generation = False
    create_on_update = False
    reset_status_on_create = False
    name_validator: Callable[[str], list[str]] = staticmethod(fe.is_dns1123_subdomain)
    # Field labels beyond metadata.name/namespace; None: upstream's generic conversion.
    extra_field_labels: tuple[str, ...] = ()
    legacy_field_label_errors = False
    merge_schema: ClassVar[Mapping[str, MergeList]] = {}

    def defaults(self, obj: Obj) -> None:
        """Fill defaulted fields (on create and on every update)."""

    def prepare_create(self, obj: Obj) -> None:
        """Server-owned fields on create (status resets and the like)."""

    def prepare_update(self, new: Obj, old: Obj) -> None:
        """Carry server-owned values over from `old` before validation."""

    def validate(self, obj: Obj) -> list[FieldError]:
        return []

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        return []

    def allocate(self, new: Obj, old: Obj | None) -> list[FieldError]:
        """Reserve resources the object needs; all-or-nothing (release on error)."""
        return []

    def release(self, obj: Obj, keep: Obj | None = None) -> None:
        """Give back what `obj` holds and `keep` (the new version) no longer does."""

    def field_labels(self, obj: Obj) -> dict[str, str]:
        meta = obj.get("metadata") or {}
        labels = {"metadata.name": meta.get("name", "")}
        if "namespace" in meta:
            labels["metadata.namespace"] = meta.get("namespace", "")
        return labels

    def spec_of(self, obj: Obj) -> Obj:
        """What a change of bumps metadata.generation."""
        return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    strategy: Strategy
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = READ_WRITE
    subresources: tuple[str, ...] = ()
    storage: str = ""
    # Converters for a type that shares another's storage (events.k8s.io/v1 Event).
    to_external: Callable[[Obj], Obj] | None = None
    from_external: Callable[[Obj], Obj] | None = None
    printer: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.group}/{self.version}/{self.plural}"

    @property
    def storage_name(self) -> str:
        return self.storage or self.key

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


# -- helpers ---------------------------------------------------------------------------
def messages(path: str, value: Any, texts: Sequence[str]) -> list[FieldError]:
    """One Invalid field error per message of a validator."""
    return [fe.invalid(path, value, m) for m in texts]


def get_path(obj: Mapping[str, Any], *path: str) -> Any:
    """The value at `path` in nested mappings, or None where the path breaks off."""
    cur: Any = obj
    for part in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def is_int(value: Any) -> TypeGuard[int]:
    """A JSON integer (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ReviewType:
    """A create-only kind computed on the spot and never stored (access and token reviews)."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"
