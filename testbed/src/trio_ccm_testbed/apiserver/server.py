"""The emulator core: `ApiServer.handle`, the one request handler behind both front doors
(the in-process transport and the HTTP listener, `testing/_http.py`).

A request is handled in upstream's order: authenticate (401), route (404), fault rules
(latency, errors, conflicts; a body fault is applied to whatever is answered), authorize
(403, when RBAC is on), negotiate the answer's media type (406 before anything is done),
then the verb. Writes go through `bodies` (decoding, field validation, options) to the
`registry`; reads come from the `store`. Answers are JSON (YAML or a Table when asked);
watch answers stream and always release their watcher when closed.

Contracts: the handler never blocks the Trio loop for long (everything but injected
latency and watch streams completes without awaiting); every error is an `ApiError`
answered as a `Status`; an injected outage raises `Refused` to the front door.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import trio
import yaml

from trio_ccm._version import __version__
from trio_ccm_testbed._http import Body, Refused, Request, Response, StreamAborted
from trio_ccm_testbed.apiserver import bodies, discovery, errors, garbage, openapi, tables, tokens
from trio_ccm_testbed.apiserver import fielderrors as fe
from trio_ccm_testbed.apiserver.auth import (
    ANONYMOUS,
    BOOTSTRAP_NON_RESOURCE_RULES,
    BOOTSTRAP_RESOURCE_RULES,
    MASTERS,
    Attributes,
    Authenticator,
    Authorizer,
    User,
)
from trio_ccm_testbed.apiserver.errors import ApiError
from trio_ccm_testbed.apiserver.faults import BODY_FAULTS, FaultRule, Faults, corrupt
from trio_ccm_testbed.apiserver.kinds import (
    REVIEW_TYPES,
    ResourceType,
    ReviewType,
    ServiceAllocator,
    standard_types,
)
from trio_ccm_testbed.apiserver.protobuf import Decoder
from trio_ccm_testbed.apiserver.registry import Registry, Write
from trio_ccm_testbed.apiserver.schema import load_schema
from trio_ccm_testbed.apiserver.selector import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    label_selector_from_object,
    parse_field_selector,
    parse_label_selector,
)
from trio_ccm_testbed.apiserver.store import (
    Frame,
    Obj,
    Preconditions,
    Store,
    Stored,
    Watcher,
    clone,
    encode,
    format_time,
    list_options_invalid,
    parse_rv,
    utc_now,
)
from trio_ccm_testbed.apiserver.transport import ApiServerTransport

JSON_TYPE = "application/json"
YAML_TYPE = "application/yaml"
RETURNS_DELETED_OBJECT = frozenset({"services", "pods", "namespaces"})
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
KUBERNETES_VERSION = (1, 33)


def respond(
    status: int,
    body: Body,
    content_type: str = JSON_TYPE,
    *,
    headers: Iterable[tuple[str, str]] = (),
    cleanup: Callable[[], None] | None = None,
) -> Response:
    """A response with the headers every answer of kube-apiserver carries."""
    return Response(
        status,
        body,
        [("content-type", content_type), ("cache-control", "no-cache, private"), *headers],
        cleanup,
    )


def _json(status: int, body: Any, content_type: str = JSON_TYPE) -> Response:
    return respond(status, encode(body), content_type)


def error_response(exc: ApiError) -> Response:
    response = _json(exc.code, exc.status())
    if exc.retry_after_s is not None:
        response.headers.append(("retry-after", str(exc.retry_after_s)))
    return response


def _warned(response: Response, validation: bodies.Validation) -> Response:
    """`response` with a Warning header for each problem field validation noted."""
    response.headers += [bodies.warning_header(text) for text in validation.warnings]
    return response


@dataclass(frozen=True)
class DeleteOptions:
    preconditions: Preconditions
    policy: str
    dry_run: bool


@dataclass(frozen=True)
class Route:
    """A parsed resource path."""

    rtype: ResourceType | ReviewType
    namespace: str
    name: str
    subresource: str


class ApiServer:
    """A Kubernetes API server emulator: state, semantics, auth and faults.

    Front doors: `transport()` (an httpx transport, no sockets; works under MockClock) and
    `serve_apiserver` in `listener.py` (real HTTP(S) on loopback).
    """

    def __init__(
        self,
        *,
        service_cidr: str = "10.96.0.0/12",
        node_port_range: tuple[int, int] = (30000, 32767),
        history_size: int = 10_000,
        watch_buffer: int = 1_000,
        bookmark_interval_s: float = 60.0,
        watch_timeout_s: tuple[float, float] = (1800.0, 3600.0),
        now: Callable[[], dt.datetime] = utc_now,
        seed: int | None = None,
        admin_token: str | None = None,
        rbac: bool = False,
        version: tuple[int, int] = KUBERNETES_VERSION,
    ) -> None:
        self.rng = random.Random(seed)  # noqa: S311 - names and dice, not secrets
        self.store = Store(
            now=now, history_size=history_size, watch_buffer=watch_buffer, rng=self.rng
        )
        self.allocator = ServiceAllocator(service_cidr, node_port_range, self.rng)
        self.authn = Authenticator(
            required=bool(admin_token) or rbac,
            signer=tokens.TokenSigner(now=self.store.now),
            account_uid=self._account_uid,
        )
        self.authz = Authorizer(self.store)
        self.rbac = rbac
        self.faults = Faults(self.rng)
        self.bookmark_interval_s = bookmark_interval_s
        self.watch_timeout_s = watch_timeout_s
        self.version = version
        self.host = "127.0.0.1"
        self.schema = load_schema()
        self.protobuf = Decoder(self.schema)
        self.registry = Registry(
            self.store, token_issuer=self.authn.issue_service_account, schema=self.schema
        )
        self.types: dict[tuple[str, str, str], ResourceType | ReviewType] = {}
        for rtype in standard_types(self.allocator):
            self.store.register(rtype)
            self.types[(rtype.group, rtype.version, rtype.plural)] = rtype
        for review in REVIEW_TYPES:
            self.types[(review.group, review.version, review.plural)] = review
        major, minor = version
        self.openapi = openapi.OpenApi(
            self.schema, list(self.types.values()), version=f"v{major}.{minor}.0"
        )
        if admin_token:
            self.authn.add_admin(admin_token)
        self._bootstrap()

    # -- set-up -----------------------------------------------------------------------
    def _bootstrap(self) -> None:
        for name in DEFAULT_NAMESPACES:
            self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self.create(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": "kubernetes",
                    "namespace": "default",
                    "labels": {"component": "apiserver", "provider": "kubernetes"},
                },
                "spec": {
                    "clusterIP": self.allocator.first_ip(),
                    "ports": [{"name": "https", "port": 443, "targetPort": 6443}],
                },
            }
        )

    def _account_uid(self, namespace: str, name: str) -> str:
        found = self.store.lookup(self.store.types["/v1/serviceaccounts"], namespace, name)
        return str(found.obj["metadata"].get("uid", "")) if found is not None else ""

    def type_for(self, api_version: str, kind: str) -> ResourceType:
        group, _, version = api_version.rpartition("/")
        for rtype in self.types.values():
            if (
                isinstance(rtype, ResourceType)
                and rtype.group == group
                and rtype.version == version
                and rtype.kind == kind
            ):
                return rtype
        raise ValueError(f"the emulator does not serve {kind} in {api_version}")

    def create(self, obj: Obj) -> Obj:
        """Create an object directly (no auth, no faults); returns the stored object."""
        rtype = self.type_for(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        namespace = (obj.get("metadata") or {}).get("namespace") or (
            "default" if rtype.namespaced else ""
        )
        return self.registry.external(rtype, self.registry.create(rtype, namespace, obj))

    def get(self, api_version: str, kind: str, name: str, namespace: str = "") -> Obj:
        rtype = self.type_for(api_version, kind)
        stored = self.store.get(self.registry.stored_type(rtype), namespace, name)
        return self.registry.external(rtype, stored.obj)

    def apply_objects(self, documents: Iterable[Any]) -> list[Obj]:
        """Create (or replace) each object, as `--rbac` files are loaded."""
        results = []
        for index, doc in enumerate(documents):
            if not doc:
                continue
            if not isinstance(doc, dict):
                raise TypeError(
                    f"document {index + 1} is a {type(doc).__name__}, not a Kubernetes object "
                    "(a mapping with apiVersion, kind and metadata)"
                )
            if doc.get("kind") == "List" or doc.get("kind", "").endswith("List"):
                results += self.apply_objects(doc.get("items") or [])
                continue
            rtype = self.type_for(str(doc.get("apiVersion", "")), str(doc.get("kind", "")))
            meta = doc.get("metadata") or {}
            namespace = meta.get("namespace") or ("default" if rtype.namespaced else "")
            existing = self.store.lookup(
                self.registry.stored_type(rtype), namespace, meta.get("name", "")
            )
            if existing is None:
                results.append(self.registry.create(rtype, namespace, doc))
            else:
                updated, _ = self.registry.update(rtype, namespace, meta["name"], doc)
                results.append(updated)
        return results

    def load_manifest_text(self, text: str) -> list[Obj]:
        return self.apply_objects(list(yaml.safe_load_all(text)))

    def transport(self) -> httpx.AsyncBaseTransport:
        """An httpx transport that reaches this server without sockets."""
        return ApiServerTransport(self.handle)

    # -- handling ---------------------------------------------------------------------
    async def handle(self, request: Request) -> Response:
        """Answer one request (the handler behind both front doors)."""
        if self.faults.refusing():
            raise Refused("emulated outage")
        try:
            return await self._handle(request)
        except ApiError as exc:
            return error_response(exc)

    async def _handle(self, request: Request) -> Response:
        user = self.authn.authenticate(request.headers.get("authorization"))
        if user is None or (user.name == ANONYMOUS and not self.rbac):
            raise errors.unauthorized()
        path = request.path
        if path.startswith("/_emulator/"):
            return await self._admin(request, user)
        parts = [p for p in path.split("/") if p]
        if not parts or parts[0] not in ("api", "apis"):
            return await self._non_resource(request, user, path)
        core = parts[0] == "api"
        if (core and len(parts) <= 2) or (not core and len(parts) <= 3):
            return await self._discovery(request, user, parts)
        group, version, rest = (
            ("", parts[1], parts[2:]) if core else (parts[1], parts[2], parts[3:])
        )
        route = self._route(group, version, rest)
        verb = self._verb(request, route)
        body_fault = await self._faults(verb, route)
        try:
            response = await self._handle_resource(request, user, route, verb)
        except ApiError as exc:
            if body_fault is None:
                raise
            response = error_response(exc)
        return corrupt(response, body_fault) if body_fault is not None else response

    async def _handle_resource(
        self, request: Request, user: User, route: Route, verb: str
    ) -> Response:
        self._authorize(
            Attributes(
                user,
                verb,
                True,
                route.rtype.group,
                route.rtype.plural,
                route.subresource,
                route.namespace,
                route.name or self._selected_name(request, verb),
            )
        )
        if isinstance(route.rtype, ReviewType):
            return self._review(request, user, route)
        return await self._resource(request, route, verb, user)

    @staticmethod
    def _selected_name(request: Request, verb: str) -> str:
        """The name a list or watch is authorized for: upstream's RequestInfo takes it from
        a field selector pinning `metadata.name` (`=` or `==`), so a rule limited by
        `resourceNames` allows watching that one object. A name that is no valid path
        segment, or a selector that does not parse, names nothing."""
        if verb not in ("list", "watch"):
            return ""
        try:
            fields = parse_field_selector(request.arg("fieldSelector"))
        except SelectorError:
            return ""
        name = fields.requires_exact_match("metadata.name") or ""
        if name in (".", "..") or "/" in name or "%" in name:
            return ""
        return name

    def _authorize(self, attrs: Attributes) -> None:
        if not self.rbac:
            return
        decision = self.authz.decide(attrs)
        if decision.allowed:
            return
        why = attrs.describe() + (f": {decision.reason}" if decision.reason else "")
        if attrs.resource_request:
            raise errors.forbidden(attrs.resource, attrs.api_group, attrs.name, why)
        raise errors.forbidden("", "", "", why)

    async def _faults(self, verb: str, route: Route) -> FaultRule | None:
        """Apply the latency, error and conflict rules that fire; return the body fault
        (garbage or truncation) to apply to the answer, if one fires."""
        fired = self.faults.pick(
            verb, route.rtype.plural, route.subresource, route.namespace, route.name
        )
        delay = sum(r.delay_s for r in fired if r.action == "latency")
        if delay > 0:
            await trio.sleep(delay)
        for rule in fired:
            if rule.action == "error":
                raise errors.for_code(rule.code, rule.message, rule.retry_after_s)
            if rule.action == "conflict":
                raise errors.conflict(
                    route.rtype.plural, route.rtype.group, route.name or "", errors.MODIFIED
                )
        return next((r for r in fired if r.action in BODY_FAULTS), None)

    def _route(self, group: str, version: str, rest: list[str]) -> Route:
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise errors.page_not_found()
        rtype = self.types.get((group, version, rest[0]))
        if rtype is None:
            raise errors.page_not_found()
        if namespace and not rtype.namespaced:
            raise errors.page_not_found()
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub and (not isinstance(rtype, ResourceType) or sub not in rtype.subresources):
            raise errors.page_not_found()
        if isinstance(rtype, ReviewType) and name:
            raise errors.page_not_found()
        return Route(rtype, namespace, name, sub)

    @staticmethod
    def _verb(request: Request, route: Route) -> str:
        method = request.method
        if method == "GET":
            if not route.name:
                return "watch" if request.flag("watch") else "list"
            return "get"
        if method == "POST":
            if route.name and not route.subresource:
                raise errors.method_not_allowed()
            return "create"
        if method == "PUT":
            if not route.name:
                raise errors.method_not_allowed()
            return "update"
        if method == "PATCH":
            if not route.name:
                raise errors.method_not_allowed()
            return "patch"
        if method == "DELETE":
            return "delete" if route.name else "deletecollection"
        raise errors.method_not_allowed()

    # -- bodies -----------------------------------------------------------------------
    def _body(self, request: Request) -> tuple[str, Any]:
        """A body that is not a stored object's (reviews, token requests, delete options,
        the admin API): JSON, YAML or protobuf, never field-validated."""
        content_type = bodies.media_type(request.headers.get("content-type", ""))
        decoded = bodies.decode(
            request.body,
            content_type,
            accepted=bodies.OBJECT_TYPES,
            decoder=self.protobuf,
            keep_pairs=False,
        )
        return content_type, decoded.value

    def _wants(self, request: Request) -> str:
        """'json', 'yaml' or 'table' from the Accept header; 406 if none fits."""
        accept = request.headers.get("accept", "")
        if not accept.strip():
            return "json"
        for part in accept.split(","):
            params = [p.strip() for p in part.split(";")]
            media = params[0].lower()
            if "as=Table" in params and media in (JSON_TYPE, "*/*"):
                if "g=meta.k8s.io" in params and ("v=v1" in params or "v=v1beta1" in params):
                    return "table"
                continue
            if any(p.startswith("as=") for p in params[1:]):
                continue
            if media in (JSON_TYPE, "*/*", "application/*"):
                return "json"
            if media == YAML_TYPE:
                return "yaml"
        raise errors.not_acceptable((JSON_TYPE, YAML_TYPE, "application/vnd.kubernetes.protobuf"))

    def _object_response(
        self, request: Request, route: Route, obj: Obj, status: int = 200, raw: bytes | None = None
    ) -> Response:
        rtype = route.rtype
        assert isinstance(rtype, ResourceType)
        wants = self._wants(request)
        if wants == "table":
            body = tables.table(
                rtype.printer,
                [self.registry.external(rtype, obj)],
                self.store.now(),
                include_object=request.arg("includeObject", "Metadata"),
                resource_version=obj["metadata"].get("resourceVersion", ""),
            )
            return _json(status, body)
        external = self.registry.external(rtype, obj)
        if wants == "yaml":
            return respond(status, yaml.safe_dump(external).encode(), YAML_TYPE)
        if raw is not None and rtype.to_external is None:
            return respond(status, raw)
        return _json(status, external)

    # -- resources --------------------------------------------------------------------
    async def _resource(self, request: Request, route: Route, verb: str, user: User) -> Response:
        rtype = route.rtype
        assert isinstance(rtype, ResourceType)
        stype = self.registry.stored_type(rtype)
        self._wants(request)  # 406 before anything is done, as upstream negotiates first
        if route.subresource == "token":
            return self._token_request(request, route)
        if route.subresource == "scale":
            return self._scale(request, route, verb)
        namespace = route.namespace
        if verb == "get":
            stored = self.store.get(stype, namespace, route.name)
            return self._object_response(request, route, stored.obj, raw=stored.raw)
        if verb == "list":
            return await self._list(request, route)
        if verb == "watch":
            return self._watch(request, route)
        if verb in ("create", "update"):
            return self._create_or_update(request, route, verb)
        if verb == "patch":
            return self._patch(request, route)
        if verb == "delete":
            options = self._delete_options(request)
            obj = self.registry.delete(
                rtype,
                namespace,
                route.name,
                preconditions=options.preconditions,
                dry_run=options.dry_run,
                policy=options.policy,
            )
            if self.store.lookup(stype, namespace, route.name) is not None or (
                rtype.plural in RETURNS_DELETED_OBJECT
            ):
                return self._object_response(request, route, obj)
            return _json(
                200,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": {
                        "name": route.name,
                        "group": rtype.group,
                        "kind": rtype.plural,
                        "uid": obj["metadata"].get("uid", ""),
                    },
                },
            )
        if verb == "deletecollection":
            return await self._delete_collection(request, route, self._delete_options(request))
        raise errors.method_not_allowed()

    def _manager(self, request: Request, options: bodies.Options) -> str:
        return options.field_manager or bodies.default_manager(
            request.headers.get("user-agent", "")
        )

    def _schema_shape(self, route: Route) -> Any:
        assert isinstance(route.rtype, ResourceType)
        return self.registry.shape(route.rtype)

    def _validation_check(
        self,
        validation: bodies.Validation,
        route: Route,
        *,
        apply: bool = False,
        within: Any = None,
    ) -> Callable[[Obj], Obj]:
        """Field validation of an object a patch or an apply produced (`within`: the merge
        or strategic patch, outside which the stored object is known to be clean)."""
        rtype = route.rtype
        shape = self._schema_shape(route)

        def check(obj: Obj) -> Obj:
            problems = bodies.unknown_sorted(self.schema, obj, shape, within=within)
            validation.add(problems)
            validation.settle(kind=rtype.kind, version=rtype.version, apply=apply)
            return self.schema.prune(obj, shape) if problems else obj

        return check

    def _create_or_update(self, request: Request, route: Route, verb: str) -> Response:
        rtype = route.rtype
        assert isinstance(rtype, ResourceType)
        options = bodies.parse_options(
            request.query, "CreateOptions" if verb == "create" else "UpdateOptions"
        )
        if verb == "create" and rtype.namespaced and not route.namespace:
            raise errors.page_not_found()
        validation = bodies.Validation(options.field_validation)
        decoded = bodies.decode(
            request.body,
            bodies.media_type(request.headers.get("content-type", "")),
            accepted=bodies.OBJECT_TYPES,
            decoder=self.protobuf,
            keep_pairs=validation.mode != bodies.IGNORE,
        )
        shape = self._schema_shape(route)
        body = decoded.value
        problems: list[str] = []
        if decoded.pairs is not None:
            problems = bodies.problems_in_order(self.schema, decoded.pairs, shape)
        elif decoded.content_type == bodies.YAML_TYPE:
            problems = decoded.yaml_duplicates + bodies.unknown_sorted(self.schema, body, shape)
        validation.add(problems)
        validation.settle(kind=rtype.kind, version=rtype.version)
        if any(p.startswith("unknown field") for p in problems) or validation.mode == bodies.IGNORE:
            body = self.schema.prune(body, shape)
        write = Write(
            manager=self._manager(request, options),
            subresource=route.subresource,
            dry_run=options.dry_run,
        )
        if verb == "create":
            obj = self.registry.create(rtype, route.namespace, body, write=write)
            response = self._object_response(request, route, obj, 201)
        else:
            obj, created = self.registry.update(
                rtype, route.namespace, route.name, body, write=write
            )
            response = self._object_response(request, route, obj, 201 if created else 200)
        return _warned(response, validation)

    def _patch(self, request: Request, route: Route) -> Response:
        rtype = route.rtype
        assert isinstance(rtype, ResourceType)
        content_type = bodies.media_type(request.headers.get("content-type", ""))
        apply = content_type == bodies.APPLY_PATCH
        options = bodies.parse_options(request.query, "PatchOptions", apply=apply)
        validation = bodies.Validation(options.field_validation)
        decoded = bodies.decode(
            request.body,
            content_type or "<none>",
            accepted=bodies.PATCH_TYPES,
            decoder=self.protobuf,
            keep_pairs=validation.mode != bodies.IGNORE,
        )
        write = Write(
            manager=self._manager(request, options),
            subresource=route.subresource,
            dry_run=options.dry_run,
            check=self._validation_check(
                validation,
                route,
                apply=apply,
                within=decoded.value
                if content_type in (bodies.MERGE_PATCH, bodies.STRATEGIC_PATCH)
                else None,
            ),
        )
        if apply:
            validation.add(decoded.yaml_duplicates)
            validation.settle(kind=rtype.kind, version=rtype.version, apply=True)
            obj, created = self.registry.apply(
                rtype, route.namespace, route.name, decoded.value, write=write, force=options.force
            )
            response = self._object_response(request, route, obj, 201 if created else 200)
            return _warned(response, validation)
        if content_type == bodies.JSON_PATCH:
            # Repeated keys inside values are lost by the JSON patch library, as upstream's.
            validation.add(bodies.json_patch_problems(decoded.pairs))
        else:
            validation.add(bodies.duplicates_in(decoded.pairs))
        obj = self.registry.patch(
            rtype, route.namespace, route.name, content_type, decoded.value, write=write
        )
        return _warned(self._object_response(request, route, obj), validation)

    def _delete_options(self, request: Request) -> DeleteOptions:
        """DeleteOptions from the body and the query, validated as upstream's
        ValidateDeleteOptions does (422 on DeleteOptions.meta.k8s.io)."""
        body: Any = {}
        if request.body.strip():
            _, body = self._body(request)
            if not isinstance(body, dict):
                raise errors.bad_request("DeleteOptions must be a JSON object")
        policy = body.get("propagationPolicy")
        if "propagationPolicy" in request.query:
            policy = request.arg("propagationPolicy")
        orphan = body.get("orphanDependents")
        if "orphanDependents" in request.query:
            orphan = request.flag("orphanDependents")
        dry_run = list(body.get("dryRun") or []) + list(request.query.get("dryRun", []))
        errs: list[fe.FieldError] = []
        if orphan is not None and policy is not None:
            errs.append(
                fe.invalid(
                    "propagationPolicy",
                    policy,
                    "orphanDependents and deletionPropagation cannot be both set",
                )
            )
        if policy is not None and policy not in (
            garbage.FOREGROUND,
            garbage.BACKGROUND,
            garbage.ORPHAN,
        ):
            errs.append(
                fe.not_supported(
                    "propagationPolicy",
                    policy,
                    (garbage.FOREGROUND, garbage.BACKGROUND, garbage.ORPHAN, "nil"),
                )
            )
        if any(value != "All" for value in dry_run):
            errs.append(fe.not_supported("dryRun", dry_run, ("All",)))
        if errs:
            raise errors.invalid("DeleteOptions", "meta.k8s.io", "", errs)
        if policy is None:
            policy = garbage.ORPHAN if orphan else garbage.BACKGROUND
        pre = body.get("preconditions") or {}
        return DeleteOptions(
            Preconditions(uid=pre.get("uid"), resource_version=pre.get("resourceVersion")),
            policy,
            bool(dry_run),
        )

    def _selectors(
        self, request: Request, rtype: ResourceType
    ) -> tuple[LabelSelector, FieldSelector]:
        try:
            labels = parse_label_selector(request.arg("labelSelector"))
            fields = parse_field_selector(request.arg("fieldSelector"))
        except SelectorError as exc:
            raise errors.bad_request(exc.message) from exc
        strategy = rtype.strategy
        supported = {"metadata.name", *strategy.extra_field_labels}
        if rtype.namespaced or not strategy.legacy_field_label_errors:
            # Kinds with their own field-label function (Nodes, Namespaces) list only theirs.
            supported.add("metadata.namespace")
        for name in sorted(fields.fields()):
            if name in supported:
                continue
            if strategy.legacy_field_label_errors:
                raise errors.bad_request(f"field label not supported: {name}")
            raise errors.bad_request(
                f'"{name}" is not a known field selector: only "metadata.name", '
                f'"metadata.namespace"'
            )
        return labels, fields

    async def _list_items(self, request: Request, route: Route) -> tuple[ResourceType, Any]:
        rtype = route.rtype
        assert isinstance(rtype, ResourceType)
        labels, fields = self._selectors(request, rtype)
        limit_text = request.arg("limit", "0") or "0"
        try:
            limit = int(limit_text)
        except ValueError as exc:
            raise errors.bad_request(f'invalid limit: "{limit_text}"') from exc
        result = await self.store.list_objects_stepped(
            self.registry.stored_type(rtype),
            route.namespace,
            labels=labels,
            fields=fields,
            limit=max(limit, 0),
            continue_token=request.arg("continue"),
            resource_version=request.arg("resourceVersion"),
            rv_match=request.arg("resourceVersionMatch"),
        )
        return rtype, result

    async def _list(self, request: Request, route: Route) -> Response:
        rtype, result = await self._list_items(request, route)
        wants = self._wants(request)
        if wants == "table":
            body = tables.table(
                rtype.printer,
                [self.registry.external(rtype, s.obj) for s in result.items],
                self.store.now(),
                include_object=request.arg("includeObject", "Metadata"),
                resource_version=str(result.rv),
                continue_token=result.continue_token,
                remaining=result.remaining,
            )
            return _json(200, body)
        meta: Obj = {"resourceVersion": str(result.rv)}
        if result.continue_token:
            meta["continue"] = result.continue_token
        if result.remaining is not None:
            meta["remainingItemCount"] = result.remaining
        if wants == "yaml":
            listed = {
                "kind": f"{rtype.kind}List",
                "apiVersion": rtype.api_version,
                "metadata": meta,
                "items": [self.registry.external(rtype, s.obj) for s in result.items],
            }
            return respond(200, yaml.safe_dump(listed).encode(), YAML_TYPE)
        head = encode(
            {"kind": f"{rtype.kind}List", "apiVersion": rtype.api_version, "metadata": meta}
        )
        items = self._raw_items(rtype, result.items)
        return respond(200, head[:-1] + b',"items":[' + b",".join(items) + b"]}")

    def _raw_items(self, rtype: ResourceType, items: list[Stored]) -> list[bytes]:
        if rtype.to_external is None:
            return [s.raw for s in items]
        return [encode(rtype.to_external(s.obj)) for s in items]

    async def _delete_collection(
        self, request: Request, route: Route, options: DeleteOptions
    ) -> Response:
        rtype, result = await self._list_items(request, route)
        deleted = []
        for stored in result.items:
            meta = stored.obj["metadata"]
            try:
                deleted.append(
                    self.registry.delete(
                        rtype,
                        meta.get("namespace", ""),
                        meta["name"],
                        dry_run=options.dry_run,
                        policy=options.policy,
                    )
                )
            except ApiError as exc:
                if exc.code != 404:
                    raise
        body = {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.api_version,
            "metadata": {"resourceVersion": str(self.store.rv)},
            "items": [self.registry.external(rtype, o) for o in deleted],
        }
        return _json(200, body)

    # -- watch ------------------------------------------------------------------------
    def _watch(self, request: Request, route: Route) -> Response:
        rtype = route.rtype
        assert isinstance(rtype, ResourceType)
        labels, fields = self._selectors(request, rtype)
        wants = self._wants(request)
        timeout_text = request.arg("timeoutSeconds")
        try:
            timeout_s = (
                float(timeout_text) if timeout_text else self.rng.uniform(*self.watch_timeout_s)
            )
        except ValueError as exc:
            raise errors.bad_request(f'invalid timeoutSeconds: "{timeout_text}"') from exc
        bookmarks = request.flag("allowWatchBookmarks")
        initial_end = request.flag("sendInitialEvents")
        rv = request.arg("resourceVersion")
        self._validate_watch_options(request, bookmarks)
        if initial_end:
            # The initial events are the current state (at least `rv`), not a replay.
            if rv not in ("", "0") and parse_rv(rv) > self.store.rv:
                raise errors.too_large_resource_version(parse_rv(rv), self.store.rv)
            rv = ""
        try:
            watcher, replay, at = self.store.open_watcher(
                self.registry.stored_type(rtype),
                route.namespace,
                labels=labels,
                fields=fields,
                resource_version=rv,
            )
        except ApiError as exc:
            if exc.code not in (410, 504):
                raise
            # Upstream answers 200 and one ERROR event; for a version it has not reached
            # it first waits up to 3 s for its cache to catch up.
            delay = 3.0 if exc.code == 504 else 0.0
            return respond(200, _error_event(exc, delay))
        render = self._renderer(request, rtype, wants)
        stream = self._stream(
            watcher, replay, rtype, render, timeout_s, bookmarks, at if initial_end else None
        )
        return respond(200, stream, cleanup=lambda: watcher.close("response closed"))

    @staticmethod
    def _validate_watch_options(request: Request, bookmarks: bool) -> None:
        errs = []
        match = request.arg("resourceVersionMatch")
        if "sendInitialEvents" in request.query:
            if match != "NotOlderThan":
                errs.append(
                    fe.forbidden(
                        "resourceVersionMatch",
                        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    )
                )
            if not bookmarks:
                errs.append(
                    fe.forbidden(
                        "allowWatchBookmarks",
                        "sendInitialEvents requires setting allowWatchBookmarks to true",
                    )
                )
        elif match:
            errs.append(
                fe.forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is "
                    "provided",
                )
            )
        if errs:
            raise list_options_invalid(*errs)

    def _renderer(
        self, request: Request, rtype: ResourceType, wants: str
    ) -> Callable[[Frame, bool], bytes]:
        if wants == "table":
            include = request.arg("includeObject", "Metadata")

            def table_frame(frame: Frame, first: bool) -> bytes:
                body = tables.table(
                    rtype.printer,
                    [self.registry.external(rtype, frame.obj)],
                    self.store.now(),
                    include_object=include,
                    resource_version=frame.obj["metadata"].get("resourceVersion", ""),
                    headers=first,
                )
                return encode({"type": frame.type, "object": body}) + b"\n"

            return table_frame
        if rtype.to_external is not None:
            convert = rtype.to_external

            def converted_frame(frame: Frame, first: bool) -> bytes:
                return encode({"type": frame.type, "object": convert(frame.obj)}) + b"\n"

            return converted_frame

        def json_frame(frame: Frame, first: bool) -> bytes:
            return b'{"type":"' + frame.type.encode() + b'","object":' + frame.raw + b"}\n"

        return json_frame

    def _bookmark(self, rtype: ResourceType, rv: int, *, initial_end: bool = False) -> bytes:
        meta: Obj = {"resourceVersion": str(rv), "creationTimestamp": None}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return (
            encode(
                {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": rtype.kind,
                        "apiVersion": rtype.api_version,
                        "metadata": meta,
                    },
                }
            )
            + b"\n"
        )

    async def _stream(
        self,
        watcher: Watcher,
        replay: Iterable[Frame | None],
        rtype: ResourceType,
        render: Callable[[Frame, bool], bytes],
        timeout_s: float,
        bookmarks: bool,
        initial_end: int | None,
    ) -> AsyncIterator[bytes]:
        """Replay, then live frames; bookmarks every interval and 2 s before the deadline."""
        deadline = trio.current_time() + timeout_s

        def next_bookmark_after(now: float) -> float:
            due = min(now + self.bookmark_interval_s, deadline - 2.0)
            return due if due > now else math.inf

        first = True
        try:
            chunk: list[bytes] = []
            for frame in replay:
                if frame is not None:
                    chunk.append(render(frame, first))
                    first = False
                if len(chunk) >= 256 or (frame is None and chunk):
                    yield b"".join(chunk)
                    chunk = []
                elif frame is None:
                    await trio.lowlevel.checkpoint()  # a pause of the replay's scan
            if chunk:
                yield b"".join(chunk)
            if initial_end is not None:
                yield self._bookmark(rtype, initial_end, initial_end=True)
            next_bookmark = next_bookmark_after(trio.current_time())
            while True:
                wake = min(deadline, next_bookmark) if bookmarks else deadline
                received: Frame | None = None
                with trio.move_on_at(wake):
                    try:
                        received = await watcher.receive.receive()
                    except trio.EndOfChannel:
                        if watcher.aborted:
                            raise StreamAborted(watcher.reason) from None
                        return
                if received is None:
                    if trio.current_time() >= deadline:
                        return
                    next_bookmark = next_bookmark_after(trio.current_time())
                    # The buffer is empty: every event up to the current version was sent.
                    yield self._bookmark(rtype, self.store.rv)
                    continue
                batch = [render(received, first)]
                first = False
                while len(batch) < 256:
                    try:
                        batch.append(render(watcher.receive.receive_nowait(), False))
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                yield b"".join(batch)
        finally:
            watcher.close("stream ended")

    # -- the scale subresource (autoscaling/v1 Scale over a Deployment) ----------------
    def _scale_of(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        selector = (obj.get("spec") or {}).get("selector")
        try:
            text = str(label_selector_from_object(selector)) if selector else ""
        except SelectorError:
            text = ""
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                key: meta[key]
                for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if key in meta
            },
            "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
            "status": {
                "replicas": (obj.get("status") or {}).get("replicas", 0),
                "selector": text,
            },
        }

    def _scale(self, request: Request, route: Route, verb: str) -> Response:
        """GET, PUT and PATCH of `deployments/NAME/scale`: the Deployment's replicas."""
        rtype = route.rtype
        assert isinstance(rtype, ResourceType)
        current = self.store.get(self.registry.stored_type(rtype), route.namespace, route.name)
        scale = self._scale_of(current.obj)
        if verb == "get":
            return _json(200, scale)
        if verb not in ("update", "patch"):
            raise errors.method_not_allowed()
        content_type = bodies.media_type(request.headers.get("content-type", ""))
        apply = verb == "patch" and content_type == bodies.APPLY_PATCH
        options = bodies.parse_options(
            request.query, "UpdateOptions" if verb == "update" else "PatchOptions", apply=apply
        )
        if verb == "update":
            _, wanted = self._body(request)
        else:
            document = bodies.decode(
                request.body,
                content_type or "<none>",
                accepted=bodies.PATCH_TYPES,
                decoder=self.protobuf,
                keep_pairs=False,
            ).value
            wanted = self.registry.patch_document(scale, content_type, document)
        if not isinstance(wanted, dict):
            raise errors.bad_request("the object provided is unrecognized or malformed")
        rv = (wanted.get("metadata") or {}).get("resourceVersion")
        if rv and rv != current.obj["metadata"]["resourceVersion"]:
            raise errors.conflict(rtype.plural, rtype.group, route.name, errors.MODIFIED)
        replicas = (wanted.get("spec") or {}).get("replicas", 0)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise errors.invalid(
                "Scale",
                "autoscaling",
                route.name,
                [fe.invalid("spec.replicas", replicas, "must be greater than or equal to 0")],
            )
        deployment = clone(current.obj)
        deployment.setdefault("spec", {})["replicas"] = replicas
        obj, _ = self.registry.update(
            rtype,
            route.namespace,
            route.name,
            deployment,
            write=Write(
                manager=self._manager(request, options),
                subresource="scale",
                dry_run=options.dry_run,
            ),
        )
        return _json(200, self._scale_of(obj))

    # -- subresources and reviews -----------------------------------------------------
    def _token_request(self, request: Request, route: Route) -> Response:
        """A TokenRequest: a bound, expiring JWT for an existing service account."""
        if request.method != "POST":
            raise errors.method_not_allowed()
        assert isinstance(route.rtype, ResourceType)
        self.store.get(route.rtype, route.namespace, route.name)
        _, body = self._body(request)
        spec = (body or {}).get("spec") or {}
        seconds = spec.get("expirationSeconds") or 3600
        errs: list[fe.FieldError] = []
        if not isinstance(seconds, int) or seconds < 600:
            errs.append(
                fe.invalid(
                    "spec.expirationSeconds",
                    seconds,
                    "may not specify a duration less than 10 minutes",
                )
            )
        elif seconds > 1 << 32:
            errs.append(fe.too_long("spec.expirationSeconds", seconds, 1 << 32))
        if errs:
            raise errors.invalid("TokenRequest", "authentication.k8s.io", route.name, errs)
        audiences = list(spec.get("audiences") or [tokens.ISSUER])
        token, expires = self.authn.request_token(
            route.namespace, route.name, audiences=audiences, expiration_s=seconds
        )
        return _json(
            201,
            {
                "kind": "TokenRequest",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {
                    "name": route.name,
                    "namespace": route.namespace,
                    "creationTimestamp": None,
                },
                "spec": {"audiences": audiences, "expirationSeconds": seconds},
                "status": {"token": token, "expirationTimestamp": format_time(expires)},
            },
        )

    def _review(self, request: Request, user: User, route: Route) -> Response:
        if request.method != "POST":
            raise errors.method_not_allowed()
        rtype = route.rtype
        _, body = self._body(request)
        if not isinstance(body, dict):
            raise errors.bad_request(f"{rtype.kind} must be a JSON object")
        spec = body.get("spec") or {}
        status: Obj
        if rtype.kind == "TokenReview":
            found = self.authn.lookup(str(spec.get("token", "")))
            status = {"authenticated": found is not None}
            if found is not None:
                status["user"] = found.info()
                status["audiences"] = spec.get("audiences") or []
            else:
                status["error"] = "invalid bearer token"
        elif rtype.kind == "SelfSubjectReview":
            status = {"userInfo": user.info()}
        elif rtype.kind == "SelfSubjectRulesReview":
            status = self._rules_review(user, str(spec.get("namespace", "")))
        else:
            subject = user
            if rtype.kind == "SubjectAccessReview":
                subject = User(
                    str(spec.get("user", "")),
                    tuple(spec.get("groups") or ()),
                    str(spec.get("uid", "")),
                )
            status = self._access_review(subject, spec)
        result = {
            "kind": rtype.kind,
            "apiVersion": rtype.api_version,
            "metadata": {"creationTimestamp": None, **(body.get("metadata") or {})},
            "spec": spec,
            "status": status,
        }
        if rtype.kind == "SelfSubjectReview":
            del result["spec"]  # the kind has no spec
        return _json(201, result)

    def _access_review(self, subject: User, spec: Mapping[str, Any]) -> Obj:
        resource = spec.get("resourceAttributes")
        non_resource = spec.get("nonResourceAttributes")
        if resource:
            attrs = Attributes(
                subject,
                str(resource.get("verb", "")),
                True,
                str(resource.get("group", "")),
                str(resource.get("resource", "")),
                str(resource.get("subresource", "")),
                str(resource.get("namespace", "")),
                str(resource.get("name", "")),
            )
        elif non_resource:
            attrs = Attributes(
                subject,
                str(non_resource.get("verb", "")),
                False,
                path=str(non_resource.get("path", "")),
            )
        else:
            raise errors.invalid(
                "SubjectAccessReview",
                "authorization.k8s.io",
                "",
                [
                    fe.invalid(
                        "spec.resourceAttributes",
                        None,
                        "exactly one of nonResourceAttributes or resourceAttributes must be "
                        "specified",
                    )
                ],
            )
        if not self.rbac:
            return {"allowed": True}
        decision = self.authz.decide(attrs)
        status: Obj = {"allowed": decision.allowed}
        if decision.reason:
            status["reason"] = decision.reason
        return status

    def _rules_review(self, user: User, namespace: str) -> Obj:
        if not self.rbac or MASTERS in user.groups:
            return {
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                "incomplete": False,
            }
        rules = [
            *BOOTSTRAP_RESOURCE_RULES,
            *BOOTSTRAP_NON_RESOURCE_RULES,
            *self.authz.rules_for(user, namespace),
        ]
        keys = ("verbs", "apiGroups", "resources", "resourceNames")
        return {
            "resourceRules": [
                {k: r[k] for k in keys if k in r} for r in rules if not r.get("nonResourceURLs")
            ],
            "nonResourceRules": [
                {"verbs": r.get("verbs", []), "nonResourceURLs": r["nonResourceURLs"]}
                for r in rules
                if r.get("nonResourceURLs")
            ],
            "incomplete": False,
        }

    # -- discovery and other paths ----------------------------------------------------
    async def _discovery(self, request: Request, user: User, parts: list[str]) -> Response:
        path = "/" + "/".join(parts)
        self._authorize(Attributes(user, "get", False, path=path))
        if request.method != "GET":
            raise errors.method_not_allowed()
        types = list(self.types.values())
        if len(parts) == 1:
            version = discovery.aggregated_version(request.headers.get("accept", ""))
            if version is not None:
                body = discovery.aggregated(types, core=parts[0] == "api", version=version)
                response = _json(200, body, discovery.aggregated_content_type(version))
                response.headers.append(("vary", "Accept"))
                return response
            if parts[0] == "api":
                return _json(200, discovery.api_versions(f"{self.host}:443"))
            return _json(200, discovery.api_group_list(types))
        if parts[0] == "api":
            found = discovery.api_resource_list(types, "", parts[1])
        elif len(parts) == 2:
            found = discovery.api_group(types, parts[1])
        else:
            found = discovery.api_resource_list(types, parts[1], parts[2])
        if found is None:
            raise errors.page_not_found()
        return _json(200, found)

    async def _non_resource(self, request: Request, user: User, path: str) -> Response:
        verb = {
            "GET": "get",
            "POST": "post",
            "PUT": "put",
            "DELETE": "delete",
            "PATCH": "patch",
            "HEAD": "head",
        }.get(request.method, "get")
        self._authorize(Attributes(user, verb, False, path=path))
        stripped = path.rstrip("/") or "/"
        if stripped in ("/healthz", "/livez", "/readyz"):
            return respond(200, b"ok", "text/plain; charset=utf-8")
        if stripped == "/version":
            major, minor = self.version
            return _json(
                200,
                {
                    "major": str(major),
                    "minor": str(minor),
                    "gitVersion": f"v{major}.{minor}.0+trio-ccm-emulator.{__version__}",
                    "gitCommit": "0" * 40,
                    "gitTreeState": "clean",
                    "buildDate": "2026-01-01T00:00:00Z",
                    "goVersion": "python",
                    "compiler": "trio-ccm",
                    "platform": "linux/amd64",
                },
            )
        if stripped == "/.well-known/openid-configuration":
            return _json(
                200,
                {
                    "issuer": tokens.ISSUER,
                    "jwks_uri": f"https://{self.host}/openid/v1/jwks",
                    "response_types_supported": ["id_token"],
                    "subject_types_supported": ["public"],
                    "id_token_signing_alg_values_supported": ["ES256"],
                },
            )
        if stripped == "/openid/v1/jwks":
            return _json(200, self.authn.signer.jwks(), "application/jwk-set+json")
        if stripped in ("/openapi/v2", "/swagger-2.0.0.pb-v1"):
            wants_protobuf = stripped.endswith("pb-v1") or "protobuf" in request.headers.get(
                "accept", ""
            )
            if wants_protobuf:
                return respond(200, self.openapi.v2_protobuf(), openapi.V2_PROTOBUF_RESPONSE)
            return _json(200, self.openapi.v2())
        if stripped == "/openapi/v3":
            return _json(200, self.openapi.v3_index())
        if stripped.startswith("/openapi/v3/"):
            segments = stripped[len("/openapi/v3/") :].split("/")
            document = None
            if segments[0] == "api" and len(segments) == 2:
                document = self.openapi.v3("", segments[1])
            elif segments[0] == "apis" and len(segments) == 3:
                document = self.openapi.v3(segments[1], segments[2])
            if document is not None:
                return _json(200, document)
        raise errors.page_not_found()

    # -- admin (fault injection over HTTP) --------------------------------------------
    async def _admin(self, request: Request, user: User) -> Response:
        if MASTERS not in user.groups:
            raise errors.forbidden(
                "",
                "",
                "",
                f'User "{user.name}" cannot use the emulator admin API (it needs the admin token)',
            )
        action = request.path[len("/_emulator/") :].strip("/")
        body: Any = {}
        if request.body.strip():
            _, body = self._body(request)
        if not isinstance(body, dict):
            raise errors.bad_request("the admin API takes a JSON object")
        if action == "faults" and request.method == "GET":
            return _json(200, {"faults": [r.describe() for r in self.faults.rules]})
        if action == "faults" and request.method == "POST":
            options = dict(body)
            kind = options.pop("action", "error")
            try:
                rule = self.faults.add(kind, **options)
            except (TypeError, ValueError) as exc:
                raise errors.bad_request(f"bad fault rule: {exc}") from exc
            return _json(201, rule.describe())
        if action == "faults" and request.method == "DELETE":
            self.faults.clear()
            return _json(200, {"faults": []})
        if action.startswith("faults/") and request.method == "DELETE":
            rule_id = action.split("/", 1)[1]
            if not rule_id.isdigit() or all(r.id != int(rule_id) for r in self.faults.rules):
                raise errors.page_not_found()
            self.faults.remove(int(rule_id))
            return _json(200, {"removed": rule_id})
        if action == "drop-watches" and request.method == "POST":
            abort = bool(body.get("abort", False))
            return _json(200, {"dropped": self.store.drop_watches(abort=abort)})
        if action == "compact" and request.method == "POST":
            self.store.compact()
            return _json(200, {"compactedResourceVersion": str(self.store.rv)})
        if action == "refuse-connections" and request.method == "POST":
            try:
                duration = float(body.get("duration_s", 5.0))
            except (TypeError, ValueError) as exc:
                raise errors.bad_request("duration_s must be a number of seconds") from exc
            self.faults.refuse_connections(duration)
            return _json(200, {"refusingForSeconds": duration})
        if action == "state" and request.method == "GET":
            return _json(
                200, {"resourceVersion": str(self.store.rv), "watchers": self.store.watcher_count()}
            )
        raise errors.page_not_found()


async def _error_event(error: ApiError, delay_s: float) -> AsyncIterator[bytes]:
    if delay_s:
        await trio.sleep(delay_s)
    yield encode({"type": "ERROR", "object": error.status()}) + b"\n"
