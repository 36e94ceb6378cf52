"""New versions of cached objects, compared before they are built.

An informer replaces a cached object with every new version the API server sends. Most
new versions change little of what we decode: a kubelet's status update changes the
resourceVersion and heartbeat times (not decoded), a label change one label. Decoding the
whole object, then comparing it with the cached one to share what did not change
(`share_unchanged`) and to tell whether anything but the resourceVersion did
(`same_but_version`), costs about three quarters of an event's time.

`Versions.build(wire, before, memo)` does it the other way round for a kind that has a
*wire form*: one parse reads the object with its large parts left as raw JSON
(`msgspec.Raw`); each raw part is compared with the cached version's by a digest of its
bytes (the `memo` kept per key), and only a part whose bytes changed is decoded, then
compared with the cached part (equal content in other bytes, e.g. keys re-ordered, is still
no change). Unchanged parts are the cached version's own objects, so sharing comes free
and nothing is compared twice. It answers the new object, its memo, and whether it
differs from `before` in more than `metadata.resourceVersion` (what `same_but_version`
answers for a full decode); the result equals what a full decode of the same JSON gives.

`NodeVersions` does this for `Node`: labels, kept annotations, spec and addresses are
digested; the conditions are decoded at once (a heartbeat changes their raw bytes, so a
digest would never match) and compared before their strings are interned. Any other kind
gets `FullVersions`: a full decode, `share_unchanged`, `same_but_version`, no memo.

The memo is four `hash()`es of bytes (64-bit, keyed per process: a collision needs two
versions of one part whose digests meet by chance, about 2**-64 per change), packed into
one int (about 60 bytes per cached Node).
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import attrgetter
from typing import Any, Final, Generic, Protocol, TypeVar, cast

import msgspec
from msgspec.structs import astuple, force_setattr

from trio_ccm.base.values import NodeAddress
from trio_ccm.kube.objects import (
    Node,
    NodeCondition,
    NodeLabels,
    NodeMeta,
    NodeSpec,
    NodeStatus,
    Object,
    ObjectMeta,
    _Base,
    kept_annotations,
    kept_conditions,
    node_labels,
    node_labels_against,
    share_unchanged,
)

__all__ = [
    "FullVersions",
    "NodeMemo",
    "NodeVersions",
    "NodeWire",
    "Versions",
    "same_but_version",
    "versions_for",
]

T = TypeVar("T", bound=Object)
T_co = TypeVar("T_co", bound=Object, covariant=True)

_NO_RAW: Final = msgspec.Raw(b"")


def same_but_version(old: Object, new: Object) -> bool:
    """Whether `new` equals `old` in every decoded field but `metadata.resourceVersion`
    (for any `Object` Struct: what a subscriber can read of it did not change)."""
    kind = type(new)
    if type(old) is not kind or type(old.metadata) is not type(new.metadata):
        return False
    at = kind.__struct_fields__.index("metadata")
    whole_old, whole_new = astuple(old), astuple(new)
    if whole_old[:at] != whole_new[:at] or whole_old[at + 1 :] != whole_new[at + 1 :]:
        return False
    version = type(new.metadata).__struct_fields__.index("resource_version")
    meta_old, meta_new = astuple(old.metadata), astuple(new.metadata)
    return (
        meta_old[:version] == meta_new[:version]
        and meta_old[version + 1 :] == meta_new[version + 1 :]
    )


class Versions(Protocol[T]):
    """How an informer reads new versions of one kind."""

    @property
    def wire(self) -> type[Any]:
        """What list items and watch objects are decoded as."""
        ...

    def build(self, wire: Any, before: T | None, memo: Any) -> tuple[T, Any, bool]:
        """The object for `wire` (sharing `before`'s unchanged parts), its memo (None: keep
        none), and whether it differs from `before` in more than the resourceVersion
        (always True without `before`). `memo` is what the last build of `before` returned."""
        ...


class FullVersions(Generic[T]):
    """Any kind: decoded whole, then shared and compared with the cached version."""

    def __init__(self, kind: type[T]) -> None:
        self.wire: type[Any] = kind

    def build(self, wire: Any, before: T | None, memo: Any) -> tuple[T, Any, bool]:
        obj: T = wire
        if before is None:
            return obj, None, True
        share_unchanged(before, obj)  # one copy of what did not change
        return obj, None, not same_but_version(before, obj)


# -- Node ------------------------------------------------------------------------------
class _NodeMetaWire(ObjectMeta, frozen=True, gc=False):
    """A Node's metadata as read: labels and annotations raw (they are digested)."""

    labels: msgspec.Raw = _NO_RAW  # type: ignore[assignment]
    annotations: msgspec.Raw = _NO_RAW  # type: ignore[assignment]


class _NodeStatusWire(_Base, frozen=True, gc=False):
    addresses: msgspec.Raw = _NO_RAW
    conditions: tuple[NodeCondition, ...] = ()


class NodeWire(_Base, frozen=True, gc=False):
    """A Node as read, before it is built: see the module docstring."""

    metadata: _NodeMetaWire = _NodeMetaWire()
    spec: msgspec.Raw = _NO_RAW
    status: _NodeStatusWire = _NodeStatusWire()


NodeMemo = int
"""Digests of a Node's raw labels, annotations, spec and addresses, packed (`_pack`)."""

# The metadata fields compared as decoded (every field but these three).
_META_SCALARS: Final = attrgetter(
    *(
        f
        for f in ObjectMeta.__struct_fields__
        if f not in {"resource_version", "labels", "annotations"}
    )
)
_LABELS: Final = msgspec.json.Decoder(dict[str, str])
_SPEC: Final = msgspec.json.Decoder(NodeSpec)
_ADDRESSES: Final = msgspec.json.Decoder(tuple[NodeAddress, ...])


_DIGEST_MASK: Final = (1 << 64) - 1


def _pack(digests: tuple[int, int, int, int]) -> NodeMemo:
    """Four 64-bit digests as one int: 60 bytes per Node, against 200 for a tuple of four."""
    labels, annotations, spec, addresses = digests
    return labels | annotations << 64 | spec << 128 | addresses << 192


def _unpack(memo: NodeMemo) -> tuple[int, int, int, int]:
    mask = _DIGEST_MASK
    return (memo & mask, memo >> 64 & mask, memo >> 128 & mask, memo >> 192)


class NodeVersions:
    """`Versions` of `Node`: see the module docstring."""

    wire: type[Any] = NodeWire

    def build(
        self, wire: NodeWire, before: Node | None, memo: NodeMemo | None
    ) -> tuple[Node, NodeMemo, bool]:
        meta, status = wire.metadata, wire.status
        mask = _DIGEST_MASK  # a part's digest: the 64 bits of its bytes' hash()
        digests = (
            hash(bytes(meta.labels)) & mask,
            hash(bytes(meta.annotations)) & mask,
            hash(bytes(wire.spec)) & mask,
            hash(bytes(status.addresses)) & mask,
        )
        packed = _pack(digests)
        if before is None or memo is None:
            return self._whole(wire), packed, True
        # Equal memos (a heartbeat: every part as before) need no unpacking.
        old = digests if packed == memo else _unpack(memo)
        was = before.metadata
        name = was.name if meta.name == was.name else meta.name
        labels = (
            was.labels
            if digests[0] == old[0]
            else _relabel(meta.labels, name, cast("NodeLabels", was.labels))
        )
        annotations = (
            was.annotations
            if digests[1] == old[1]
            else _same(was.annotations, _annotations(meta.annotations))
        )
        spec = before.spec if digests[2] == old[2] else _shared(before.spec, _spec(wire.spec))
        addresses = (
            before.status.addresses
            if digests[3] == old[3]
            else _same(before.status.addresses, _addresses(status.addresses))
        )
        conditions = kept_conditions(status.conditions)
        if conditions == before.status.conditions:
            conditions = before.status.conditions
        scalars_same = _META_SCALARS(meta) == _META_SCALARS(was)
        changed = not (
            scalars_same
            and labels is was.labels
            and annotations is was.annotations
            and spec is before.spec
            and addresses is before.status.addresses
            and conditions is before.status.conditions
        )
        if scalars_same:
            new_meta = was.__copy__()  # type: ignore[attr-defined]  # copy.copy's own call, direct
            force_setattr(new_meta, "resource_version", meta.resource_version)
            force_setattr(new_meta, "labels", labels)
            force_setattr(new_meta, "annotations", annotations)
        else:
            new_meta = _meta(meta, labels, annotations)
            share_unchanged(was, new_meta)
        if addresses is before.status.addresses and conditions is before.status.conditions:
            # The status as cached (its Hostname address already shares the name).
            new = before.__copy__()  # type: ignore[attr-defined]
            force_setattr(new, "metadata", new_meta)
            force_setattr(new, "spec", spec)
            return new, packed, changed
        new_status = NodeStatus(addresses=addresses, conditions=conditions)
        return Node(metadata=new_meta, spec=spec, status=new_status), packed, changed

    def _whole(self, wire: NodeWire) -> Node:
        meta = wire.metadata
        labels = _labels(meta.labels, meta.name)
        return Node(
            metadata=_meta(meta, labels, _annotations(meta.annotations)),
            spec=_spec(wire.spec),
            status=NodeStatus(
                addresses=_addresses(wire.status.addresses), conditions=wire.status.conditions
            ),
        )


def _meta(
    meta: _NodeMetaWire, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> NodeMeta:
    # NodeMeta keeps NodeLabels given as they are (its __post_init__ compacts mappings).
    return NodeMeta(
        name=meta.name,
        namespace=meta.namespace,
        uid=meta.uid,
        resource_version=meta.resource_version,
        generation=meta.generation,
        creation_timestamp=meta.creation_timestamp,
        deletion_timestamp=meta.deletion_timestamp,
        labels=labels,
        annotations=annotations,
        finalizers=meta.finalizers,
        owner_references=meta.owner_references,
    )


def _labels(raw: msgspec.Raw, name: str) -> Mapping[str, str]:
    return _mapping(node_labels(_LABELS.decode(raw) if raw else None, name))


def _relabel(raw: msgspec.Raw, name: str, was: NodeLabels) -> Mapping[str, str]:
    return _mapping(node_labels_against(_LABELS.decode(raw) if raw else None, name, was))


def _annotations(raw: msgspec.Raw) -> Mapping[str, str]:
    return _mapping(kept_annotations(_LABELS.decode(raw) if raw else None))


def _mapping(labels: NodeLabels) -> Mapping[str, str]:
    return cast("Mapping[str, str]", labels)  # a registered Mapping: mypy cannot see it


def _spec(raw: msgspec.Raw) -> NodeSpec:
    return _SPEC.decode(raw) if raw else NodeSpec()


def _addresses(raw: msgspec.Raw) -> tuple[NodeAddress, ...]:
    return _ADDRESSES.decode(raw) if raw else ()


_V = TypeVar("_V")


def _same(before: _V, after: _V) -> _V:
    """`before` when equal to `after` (so the cached object is kept), else `after`."""
    return before if before == after else after


def _shared(before: NodeSpec, after: NodeSpec) -> NodeSpec:
    if before == after:
        return before
    share_unchanged(before, after)
    return after


def versions_for(kind: type[T]) -> Versions[T]:
    """How an informer of `kind` reads new versions."""
    if kind is Node:
        return NodeVersions()  # type: ignore[return-value]
    return FullVersions(kind)
