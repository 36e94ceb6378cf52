"""Create, update, patch, apply and delete with upstream's generic-registry semantics.

What is the same for every kind lives here (metadata rules, optimistic concurrency,
preconditions, finalizers and graceful deletion, status subresources, generation, no-op
updates, dry runs, managed fields, server-side apply); what differs lives in each kind's
strategy (`kinds/`).

Contracts:
- Every write through the API names a field manager (`Write.manager`) and records what it
  owns in `metadata.managedFields` (see `managed.py`); a write through the Python API
  (`Write.manager` None) leaves the managed fields as they were.
- Managed fields are computed after defaulting and before allocation, so defaulted fields
  belong to the writer and allocated ones (cluster IPs, node ports) to nobody, as upstream.
- An update that changes nothing writes nothing and keeps the resourceVersion.
- A dry run validates and allocates exactly as a real write, then gives everything back.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from trio_ccm_testbed.apiserver import errors, garbage
from trio_ccm_testbed.apiserver import fielderrors as fe
from trio_ccm_testbed.apiserver import patch as patches
from trio_ccm_testbed.apiserver.errors import ApiError
from trio_ccm_testbed.apiserver.fielderrors import FieldError
from trio_ccm_testbed.apiserver.kinds import ResourceType
from trio_ccm_testbed.apiserver.managed import FieldManager
from trio_ccm_testbed.apiserver.managed import Request as ManagedRequest
from trio_ccm_testbed.apiserver.schema import Schema, Shape, load_schema
from trio_ccm_testbed.apiserver.store import (
    Obj,
    Preconditions,
    Store,
    Stored,
    clone,
    finalizer_errors,
    format_time,
    name_required,
)

PROTECTED_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH)

TokenIssuer = Callable[[str, str, str], str]  # (namespace, service account, secret) -> token
Check = Callable[[Obj], Obj]  # field validation of a patched object: raise, or prune


@dataclass(frozen=True)
class Write:
    """How a write reached the registry: who wrote (None: the Python API), through which
    endpoint, and what checks the object a patch or an apply produced."""

    manager: str | None = None
    subresource: str = ""
    dry_run: bool = False
    check: Check | None = None


def _mask_trailing_dash(prefix: str) -> str:
    return prefix[:-1] + "a" if len(prefix) > 1 and prefix.endswith("-") else prefix


def validate_metadata(rtype: ResourceType, obj: Obj) -> list[FieldError]:
    """Upstream's ValidateObjectMeta, with the kind's name rule."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return [fe.required("metadata")]
    errs: list[FieldError] = []
    name = meta.get("name", "")
    if not name:
        if meta.get("generateName"):
            prefix = _mask_trailing_dash(meta["generateName"])
            errs += [
                fe.invalid("metadata.generateName", meta["generateName"], m)
                for m in rtype.strategy.name_validator(prefix)
            ]
        else:
            errs.append(name_required())
    elif not isinstance(name, str):
        errs.append(fe.invalid("metadata.name", name, "must be a string"))
    else:
        errs += [fe.invalid("metadata.name", name, m) for m in rtype.strategy.name_validator(name)]
    namespace = meta.get("namespace", "")
    if rtype.namespaced:
        if not namespace:
            errs.append(fe.required("metadata.namespace"))
        else:
            errs += [
                fe.invalid("metadata.namespace", namespace, m)
                for m in fe.is_dns1123_label(namespace)
            ]
    elif namespace:
        errs.append(fe.forbidden("metadata.namespace", "not allowed on this type"))
    errs += fe.validate_labels(meta.get("labels") or {}, "metadata.labels")
    errs += fe.validate_annotations(meta.get("annotations") or {}, "metadata.annotations")
    errs += fe.validate_finalizers(meta.get("finalizers") or [], "metadata.finalizers")
    controllers = 0
    for i, ref in enumerate(meta.get("ownerReferences") or []):
        path = f"metadata.ownerReferences[{i}]"
        if not isinstance(ref, dict):
            errs.append(fe.invalid(path, ref, "must be an object"))
            continue
        for attr in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(attr):
                errs.append(fe.required(f"{path}.{attr}", f"{attr} must not be empty"))
        controllers += 1 if ref.get("controller") else 0
    if controllers > 1:
        errs.append(
            fe.invalid(
                "metadata.ownerReferences",
                meta.get("ownerReferences"),
                "Only one reference can have Controller set to true",
            )
        )
    return errs


class Registry:
    """The write path for stored kinds."""

    def __init__(
        self,
        store: Store,
        *,
        token_issuer: TokenIssuer | None = None,
        schema: Schema | None = None,
    ) -> None:
        self.store = store
        self.token_issuer = token_issuer
        self.schema = schema or load_schema()
        self.fields = FieldManager(self.schema, store.now)
        self.gc = garbage.GarbageCollector(
            store,
            delete=self.delete,
            update=partial(self.update, write=Write(manager=garbage.GC_MANAGER)),
        )

    def shape(self, rtype: ResourceType) -> Shape:
        """The schema of a kind's objects (in the form of `rtype`'s group-version)."""
        definition = self.schema.for_kind(rtype.group, rtype.version, rtype.kind)
        if definition is None:
            raise KeyError(f"no schema for {rtype.kind} in {rtype.api_version}")
        return {"$ref": definition.name}

    def _managed_request(self, rtype: ResourceType, write: Write) -> ManagedRequest:
        assert write.manager is not None
        stype = self.stored_type(rtype)
        return ManagedRequest(
            write.manager,
            stype.api_version,
            write.subresource,
            rtype.strategy.status_subresource,
        )

    # -- representation ---------------------------------------------------------------
    def internal(self, rtype: ResourceType, body: Obj) -> Obj:
        return rtype.from_external(body) if rtype.from_external else body

    def external(self, rtype: ResourceType, obj: Obj) -> Obj:
        return rtype.to_external(obj) if rtype.to_external else obj

    def stored_type(self, rtype: ResourceType) -> ResourceType:
        """The type whose storage (and kind/apiVersion) objects are kept in."""
        return self.store.types.get(rtype.storage_name, rtype)

    def _check_type(self, rtype: ResourceType, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request(
                f"the object provided is unrecognized or malformed: expected a JSON object "
                f"for {rtype.kind}"
            )
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if api_version and api_version != rtype.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rtype.api_version})"
            )
        if kind and kind != rtype.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rtype.kind})"
            )
        body.setdefault("metadata", {})
        if not isinstance(body["metadata"], dict):
            raise errors.bad_request("metadata must be a JSON object")
        return body

    def _invalid(self, rtype: ResourceType, name: str, errs: list[FieldError]) -> ApiError:
        return errors.invalid(rtype.kind, rtype.group, name, errs)

    def _check_namespace(self, rtype: ResourceType, namespace: str) -> None:
        if not rtype.namespaced:
            return
        ns_type = self.store.types["/v1/namespaces"]
        found = self.store.lookup(ns_type, "", namespace)
        if found is None:
            raise errors.not_found("namespaces", "", namespace)
        if found.obj["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f'{rtype.plural} "{namespace}" is forbidden: unable to create new content in '
                f"namespace {namespace} because it is being terminated",
                details={
                    "name": namespace,
                    "kind": rtype.plural,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {namespace} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    # -- create -----------------------------------------------------------------------
    def create(
        self,
        rtype: ResourceType,
        namespace: str,
        body: Any,
        *,
        dry_run: bool = False,
        write: Write | None = None,
        managed: list[Obj] | None = None,
    ) -> Obj:
        """Create an object; `managed` are its managedFields when the caller computed them
        (a server-side apply that creates)."""
        write = write or Write(dry_run=dry_run)
        dry_run = write.dry_run
        body = self._check_type(rtype, body)
        obj = self.internal(rtype, clone(body))
        stype = self.stored_type(rtype)
        meta = obj["metadata"]
        if rtype.namespaced:
            body_ns = meta.get("namespace", "")
            if body_ns and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match "
                    "the namespace sent on the request"
                )
            meta["namespace"] = namespace
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = self.store.generate_name(meta["generateName"])
        obj["kind"], obj["apiVersion"] = stype.kind, stype.api_version
        strategy = rtype.strategy
        for attr in (
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
        ):
            meta.pop(attr, None)
        meta["uid"] = self.store.new_uid()
        meta["creationTimestamp"] = format_time(self.store.now())
        if strategy.track_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if strategy.reset_status_on_create:
            obj.pop("status", None)
        strategy.prepare_create(obj)
        strategy.defaults(obj)
        self._mint_token(rtype, obj)
        errs = validate_metadata(rtype, obj) + strategy.validate(obj)
        name = meta.get("name", "")
        if errs:
            raise self._invalid(rtype, name, errs)
        self._check_namespace(rtype, namespace)
        if self.store.lookup(stype, namespace if rtype.namespaced else "", name) is not None:
            raise errors.already_exists(rtype.plural, rtype.group, name)
        if managed is None and write.manager is not None:
            managed = self.fields.update(
                None, obj, self.shape(stype), self._managed_request(rtype, write)
            )
        if managed:
            meta["managedFields"] = managed
        errs = strategy.allocate(obj, None)
        if errs:
            raise self._invalid(rtype, name, errs)
        if dry_run:
            strategy.release(obj)
            obj["metadata"]["resourceVersion"] = ""
            return obj
        return self.store.commit(stype, "ADDED", obj, None).obj

    def _mint_token(self, rtype: ResourceType, obj: Obj) -> None:
        """The token controller's job: fill service-account-token Secrets."""
        if rtype.kind != "Secret" or obj.get("type") != "kubernetes.io/service-account-token":
            return
        account = (obj["metadata"].get("annotations") or {}).get(
            "kubernetes.io/service-account.name", ""
        )
        if not account or self.token_issuer is None:
            return
        namespace = obj["metadata"].get("namespace", "")
        token = self.token_issuer(namespace, account, obj["metadata"].get("name", ""))
        data = obj.setdefault("data", {})
        data["token"] = base64.b64encode(token.encode()).decode()
        data["namespace"] = base64.b64encode(namespace.encode()).decode()

    # -- update -----------------------------------------------------------------------
    def update(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
        write: Write | None = None,
    ) -> tuple[Obj, bool]:
        """Returns the object and whether it was created (PUT on create-on-update kinds)."""
        write = write or Write(subresource=subresource, dry_run=dry_run)
        subresource, dry_run = write.subresource, write.dry_run
        body = self._check_type(rtype, body)
        new = self.internal(rtype, clone(body))
        meta = new["metadata"]
        body_name = meta.get("name", "")
        if body_name and body_name != name:
            raise errors.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        body_ns = meta.get("namespace", "")
        if rtype.namespaced and body_ns and body_ns != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the "
                "namespace sent on the request"
            )
        stype = self.stored_type(rtype)
        current = self.store.lookup(stype, namespace, name)
        if current is None:
            if rtype.strategy.create_on_update and not subresource:
                meta["name"] = name
                return self.create(rtype, namespace, body, write=write), True
            raise errors.not_found(rtype.plural, rtype.group, name)
        rv = meta.get("resourceVersion", "")
        if rv and rv != current.obj["metadata"]["resourceVersion"]:
            raise errors.conflict(rtype.plural, rtype.group, name, errors.MODIFIED)
        return self._apply_update(rtype, stype, current, new, write), False

    def _apply_update(
        self,
        rtype: ResourceType,
        stype: ResourceType,
        current: Stored,
        new: Obj,
        write: Write,
        managed: list[Obj] | None = None,
    ) -> Obj:
        subresource, dry_run = write.subresource, write.dry_run
        strategy = rtype.strategy
        old = current.obj
        name = old["metadata"]["name"]
        if subresource == "status":
            merged = clone(old)
            merged["status"] = new.get("status", {})
            merged["metadata"] = new["metadata"]
            new = merged
        elif strategy.status_subresource:
            if "status" in old:
                new["status"] = clone({"s": old["status"]})["s"]
            else:
                new.pop("status", None)
        meta, old_meta = new["metadata"], old["metadata"]
        uid = meta.get("uid")
        if uid and uid != old_meta["uid"]:
            raise self._invalid(
                rtype, name, [fe.invalid("metadata.uid", uid, "field is immutable")]
            )
        for attr in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
            "name",
        ):
            if attr in old_meta:
                meta[attr] = old_meta[attr]
            else:
                meta.pop(attr, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        new["kind"], new["apiVersion"] = stype.kind, stype.api_version
        strategy.prepare_update(new, old)
        strategy.defaults(new)
        if strategy.track_generation and strategy.spec_of(new) != strategy.spec_of(old):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        errs = (
            validate_metadata(rtype, new)
            + strategy.validate(new)
            + strategy.validate_update(new, old)
            + finalizer_errors(new, old)
        )
        if errs:
            raise self._invalid(rtype, name, errs)
        if managed is None and write.manager is not None:
            managed = self.fields.update(
                old, new, self.shape(stype), self._managed_request(rtype, write)
            )
        elif managed is None:
            managed = old_meta.get("managedFields")
        if managed:
            meta["managedFields"] = managed
        else:
            meta.pop("managedFields", None)
        if new == old:
            return old  # a no-op update writes nothing and keeps the resourceVersion
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and (rtype.kind != "Namespace")
        ):
            # The last finalizer is gone: the object is deleted, as it was last stored.
            if dry_run:
                return new
            return self._remove(stype, current)
        errs = strategy.allocate(new, old)
        if errs:
            raise self._invalid(rtype, name, errs)
        if dry_run:
            strategy.release(new, old)
            return new
        stored = self.store.commit(stype, "MODIFIED", new, current)
        strategy.release(old, new)
        self.gc.updated()
        if rtype.kind == "Namespace" and meta.get("deletionTimestamp"):
            self._finish_namespace(name)
            if self.store.lookup(stype, "", name) is None:
                return self.store.storage(stype).history[-1].obj
        return stored.obj

    # -- patch ------------------------------------------------------------------------
    def patch(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        document: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
        write: Write | None = None,
    ) -> Obj:
        write = write or Write(subresource=subresource, dry_run=dry_run)
        stype = self.stored_type(rtype)
        current = self.store.get(stype, namespace, name)
        original = self.external(rtype, current.obj)
        patched = self.patch_document(original, content_type, document, rtype.strategy.merge_schema)
        if not isinstance(patched, dict):
            raise errors.bad_request("the patched object is not a JSON object")
        if write.check is not None:
            patched = write.check(patched)
        patched = self._check_type(rtype, clone(patched))
        new = self.internal(rtype, patched)
        meta = new["metadata"]
        if meta.get("name") != name or (rtype.namespaced and meta.get("namespace") != namespace):
            raise errors.bad_request(
                "metadata.name and metadata.namespace may not be changed by a patch"
            )
        rv = meta.get("resourceVersion", "")
        if rv != current.obj["metadata"]["resourceVersion"]:
            raise errors.conflict(rtype.plural, rtype.group, name, errors.MODIFIED)
        return self._apply_update(rtype, stype, current, new, write)

    @staticmethod
    def patch_document(
        original: Obj,
        content_type: str,
        document: Any,
        merge_schema: patches.PatchSchema | None = None,
    ) -> Any:
        """`original` with a JSON, merge, strategic or (as a merge) apply patch applied;
        400 for a patch that cannot be read, 422 for one that cannot be applied."""
        try:
            if content_type == JSON_PATCH:
                return patches.json_patch(original, document)
            if content_type in (MERGE_PATCH, APPLY_PATCH):
                return patches.json_merge_patch(original, document)
            return patches.strategic_merge_patch(original, document, merge_schema or {})
        except patches.MalformedPatchError as exc:
            raise errors.bad_request(exc.message) from exc
        except patches.PatchApplyError as exc:
            raise errors.unprocessable(exc.message) from exc

    # -- server-side apply ------------------------------------------------------------
    def apply(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        config: Any,
        *,
        write: Write,
        force: bool = False,
    ) -> tuple[Obj, bool]:
        """Server-side apply of `config` by `write.manager`; returns the object and whether
        it was created. Conflicts with other managers are 409 unless `force`."""
        assert write.manager is not None
        config = self._check_type(rtype, config)
        meta = config["metadata"]
        if meta.get("managedFields") is not None:
            raise errors.bad_request("metadata.managedFields must be nil")
        if meta.get("name", name) != name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the "
                f"URL ({name})"
            )
        if rtype.namespaced and meta.get("namespace", namespace) != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        config.setdefault("apiVersion", rtype.api_version)
        config.setdefault("kind", rtype.kind)
        stype = self.stored_type(rtype)
        current = self.store.lookup(stype, namespace, name)
        live = self.external(rtype, current.obj) if current is not None else None
        if write.subresource and live is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        gvk = f"{rtype.api_version if rtype.group else '/' + rtype.version}, Kind={rtype.kind}"
        merged = self.fields.apply(
            clone(live) if live is not None else None,
            config,
            self.shape(rtype),
            self._managed_request(rtype, write),
            force=force,
            name=name,
            namespace=namespace if rtype.namespaced else "",
            gvk=gvk,
        )
        if write.check is not None:
            merged = write.check(merged)
        managed = merged["metadata"].pop("managedFields")
        if current is None:
            merged["metadata"]["name"] = name
            return self.create(rtype, namespace, merged, write=write, managed=managed), True
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv and wanted_rv != current.obj["metadata"]["resourceVersion"]:
            raise errors.conflict(rtype.plural, rtype.group, name, errors.MODIFIED)
        new = self.internal(rtype, self._check_type(rtype, merged))
        new["metadata"]["resourceVersion"] = current.obj["metadata"]["resourceVersion"]
        return self._apply_update(rtype, stype, current, new, write, managed), False

    # -- delete -----------------------------------------------------------------------
    def delete(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        *,
        preconditions: Preconditions | None = None,
        dry_run: bool = False,
        policy: str = garbage.BACKGROUND,
    ) -> Obj:
        """Delete an object: at once, or (with finalizers, or a Foreground/Orphan policy)
        by marking it deleting until its finalizers are gone (see `garbage.py`)."""
        preconditions = preconditions or Preconditions()
        stype = self.stored_type(rtype)
        current = self.store.get(stype, namespace, name)
        meta = current.obj["metadata"]
        if preconditions.uid is not None and preconditions.uid != meta["uid"]:
            raise errors.conflict(
                rtype.plural,
                rtype.group,
                name,
                f"Precondition failed: UID in precondition: {preconditions.uid}, UID in object "
                f"meta: {meta['uid']}",
            )
        rv = preconditions.resource_version
        if rv is not None and rv != meta["resourceVersion"]:
            raise errors.conflict(
                rtype.plural,
                rtype.group,
                name,
                f"Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion "
                f"in object meta: {meta['resourceVersion']}",
            )
        if rtype.kind == "Namespace" and name in PROTECTED_NAMESPACES:
            raise errors.forbidden("namespaces", "", name, "this namespace may not be deleted")
        if meta.get("deletionTimestamp"):
            return current.obj
        if rtype.kind == "Namespace":
            return self._delete_namespace(stype, current, dry_run)
        added = {
            garbage.FOREGROUND: garbage.FOREGROUND_FINALIZER,
            garbage.ORPHAN: garbage.ORPHAN_FINALIZER,
        }
        extra = [added[policy]] if policy in added else []
        if meta.get("finalizers") or extra:
            deleting = self._mark_deleting(stype, current, dry_run, extra)
            if not dry_run and extra:
                self.gc.deleting(stype, deleting)
            return deleting
        if dry_run:
            return current.obj
        return self._remove(stype, current)

    def _mark_deleting(
        self, stype: ResourceType, current: Stored, dry_run: bool, extra: Sequence[str] = ()
    ) -> Obj:
        new = clone(current.obj)
        meta = new["metadata"]
        if extra:
            meta["finalizers"] = [
                *(meta.get("finalizers") or []),
                *(f for f in extra if f not in (meta.get("finalizers") or [])),
            ]
        meta["deletionTimestamp"] = format_time(self.store.now())
        meta["deletionGracePeriodSeconds"] = 0
        if stype.strategy.track_generation:
            meta["generation"] = int(meta.get("generation", 1)) + 1
        if dry_run:
            return new
        return self.store.commit(stype, "MODIFIED", new, current).obj

    def _remove(self, stype: ResourceType, current: Stored) -> Obj:
        gone = clone(current.obj)
        stored = self.store.commit(stype, "DELETED", gone, current)
        stype.strategy.release(current.obj)
        namespace = gone["metadata"].get("namespace", "")
        if namespace:
            self._finish_namespace(namespace)
        self.gc.removed(stored.obj)
        return stored.obj

    def _delete_namespace(self, stype: ResourceType, current: Stored, dry_run: bool) -> Obj:
        if dry_run:
            return current.obj
        name = current.obj["metadata"]["name"]
        new = clone(current.obj)
        new["metadata"]["deletionTimestamp"] = format_time(self.store.now())
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        new.setdefault("status", {})["phase"] = "Terminating"
        result = self.store.commit(stype, "MODIFIED", new, current).obj
        # The namespace controller's job, done at once: delete everything inside.
        for storage, stored in list(self.store.iter_namespace(name)):
            owner = next(
                (
                    t
                    for t in self.store.types.values()
                    if t.storage_name == storage.name and not t.to_external
                ),
                None,
            )
            if owner is not None and not stored.obj["metadata"].get("deletionTimestamp"):
                if stored.obj["metadata"].get("finalizers"):
                    self._mark_deleting(owner, stored, dry_run=False)
                else:
                    self._remove(owner, stored)
        self._finish_namespace(name)
        found = self.store.lookup(stype, "", name)
        return found.obj if found else result

    def _finish_namespace(self, namespace: str) -> None:
        ns_type = self.store.types["/v1/namespaces"]
        ns = self.store.lookup(ns_type, "", namespace)
        if ns is None or not ns.obj["metadata"].get("deletionTimestamp"):
            return
        if ns.obj["metadata"].get("finalizers"):
            return
        if next(self.store.iter_namespace(namespace), None) is not None:
            return
        gone = clone(ns.obj)
        gone.setdefault("spec", {})["finalizers"] = []
        self.store.commit(ns_type, "DELETED", gone, ns)
