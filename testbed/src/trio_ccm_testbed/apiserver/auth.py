"""Bearer-token authentication and RBAC authorization, as kube-apiserver decides them.

RBAC objects are ordinary stored objects (loaded from `--rbac` files or written through the
API); the authorizer reads the current ones on every request, so a test can change a rule
and see the effect at once.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trio_ccm_testbed.apiserver.store import Store
from trio_ccm_testbed.apiserver.tokens import TokenSigner

ANONYMOUS = "system:anonymous"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        body: dict[str, Any] = {"username": self.name}
        if self.uid:
            body["uid"] = self.uid
        body["groups"] = list(self.groups)
        if self.extra:
            body["extra"] = {key: list(values) for key, values in self.extra.items()}
        return body


ANONYMOUS_USER = User(ANONYMOUS, (UNAUTHENTICATED,))


def service_account_user(
    namespace: str, name: str, uid: str = "", extra: Mapping[str, tuple[str, ...]] | None = None
) -> User:
    return User(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
        uid,
        extra or {},
    )


OPEN_ADMIN = User("system:admin", (MASTERS, AUTHENTICATED))


class Authenticator:
    """Maps bearer tokens to users. Tokens are minted here or registered by the caller.

    With `required` off (no admin token and no RBAC), requests without a known token act
    as a cluster admin, as against an API server with authentication switched off.
    """

    def __init__(
        self,
        *,
        required: bool = False,
        signer: TokenSigner | None = None,
        account_uid: Callable[[str, str], str] | None = None,
    ) -> None:
        self.tokens: dict[str, User] = {}
        self.expiries: dict[str, dt.datetime] = {}
        self.required = required
        self.signer = signer or TokenSigner(now=lambda: dt.datetime.now(dt.UTC))
        self._account_uid = account_uid or (lambda namespace, name: "")

    def add(self, token: str, user: User) -> None:
        self.tokens[token] = user

    def add_admin(self, token: str, name: str = "admin") -> None:
        self.add(token, User(name, (MASTERS, AUTHENTICATED)))

    def issue(self, user: User) -> str:
        token = secrets.token_urlsafe(32)
        self.add(token, user)
        return token

    def issue_service_account(self, namespace: str, name: str, secret: str = "") -> str:
        """A legacy (Secret-style, never expiring) JWT for a service account."""
        uid = self._account_uid(namespace, name)
        token = self.signer.legacy(namespace, name, uid, secret or f"{name}-token")
        self.add(token, service_account_user(namespace, name, uid))
        return token

    def request_token(
        self, namespace: str, name: str, *, audiences: list[str] | None, expiration_s: int
    ) -> tuple[str, dt.datetime]:
        """A bound TokenRequest JWT for a service account, and when it expires."""
        uid = self._account_uid(namespace, name)
        token, expires, jti = self.signer.bound(
            namespace, name, uid, audiences=audiences, expiration_s=expiration_s
        )
        extra = {"authentication.kubernetes.io/credential-id": (f"JTI={jti}",)}
        self.add(token, service_account_user(namespace, name, uid, extra))
        self.expiries[token] = expires
        return token, expires

    def lookup(self, token: str) -> User | None:
        """The user a token stands for, or None if unknown or expired."""
        found = self.tokens.get(token)
        expires = self.expiries.get(token)
        if found is not None and expires is not None and self.signer.now() >= expires:
            return None
        return found

    def authenticate(self, authorization: str | None) -> User | None:
        """The user for an Authorization header; ANONYMOUS_USER when absent; None if invalid."""
        if not authorization:
            return ANONYMOUS_USER if self.required else OPEN_ADMIN
        scheme, _, token = authorization.partition(" ")
        found = self.lookup(token.strip()) if scheme.lower() == "bearer" else None
        if found is None and not self.required:
            return OPEN_ADMIN
        return found


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do (upstream's authorizer.Attributes)."""

    user: User
    verb: str
    resource_request: bool
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    def describe(self) -> str:
        """Upstream's 403 reason text, without the 'is forbidden' subject."""
        who = f'User "{self.user.name}"'
        if not self.resource_request:
            return f'{who} cannot {self.verb} path "{self.path}"'
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        scope = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        return (
            f'{who} cannot {self.verb} resource "{resource}" in API group '
            f'"{self.api_group}" {scope}'
        )


# Bootstrap policy every real cluster has (system:discovery, system:basic-user,
# system:public-info-viewer), so that authenticated clients can discover the API.
_PUBLIC_PATHS = ("/healthz", "/livez", "/readyz", "/version", "/version/")
_DISCOVERY_PATHS = ("/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*")
_SELF_REVIEWS = {
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
}


def _path_matches(patterns: Iterable[str], path: str) -> bool:
    for pattern in patterns:
        if pattern == "*" or pattern == path:
            return True
        if pattern.endswith("*") and path.startswith(pattern[:-1]):
            return True
    return False


def rule_allows(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if not attrs.resource_request:
        return _path_matches(rule.get("nonResourceURLs") or [], attrs.path)
    groups = rule.get("apiGroups") or []
    if "*" not in groups and attrs.api_group not in groups:
        return False
    resources = rule.get("resources") or []
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    if not any(
        r == "*"
        or r == combined
        or (attrs.subresource and r == f"*/{attrs.subresource}")
        or (attrs.subresource and r == f"{attrs.resource}/*")
        for r in resources
    ):
        return False
    names = rule.get("resourceNames") or []
    return not names or (bool(attrs.name) and attrs.name in names)


def _subject_matches(subject: Mapping[str, Any], user: User, namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == user.name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or namespace
        return user.name == f"system:serviceaccount:{ns}:{name}"
    return False


@dataclass(frozen=True)
class Decision:
    """An authorization answer; `reason` is upstream's text (empty when there is none)."""

    allowed: bool
    reason: str = ""


def _describe_subject(subject: Mapping[str, Any], namespace: str) -> str:
    kind, name = subject.get("kind", ""), subject.get("name", "")
    if kind == "ServiceAccount":
        return f'ServiceAccount "{name}/{subject.get("namespace") or namespace}"'
    return f'{kind} "{name}"'


class Authorizer:
    """RBAC over the store's current Roles, ClusterRoles and their bindings."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _objects(self, key: str, namespace: str | None = None) -> list[dict[str, Any]]:
        rtype = self.store.types[key]
        objects = self.store.storage(rtype).objects
        return [s.obj for (ns, _), s in objects.items() if namespace is None or ns == namespace]

    def _role(self, ref: Mapping[str, Any], namespace: str) -> tuple[list[Mapping[str, Any]], str]:
        """The role's rules, or an error text naming the missing role."""
        name = str(ref.get("name", ""))
        if ref.get("kind") == "ClusterRole":
            rtype = self.store.types["rbac.authorization.k8s.io/v1/clusterroles"]
            found = self.store.lookup(rtype, "", name)
            missing = f'clusterrole.rbac.authorization.k8s.io "{name}" not found'
        else:
            rtype = self.store.types["rbac.authorization.k8s.io/v1/roles"]
            found = self.store.lookup(rtype, namespace, name)
            missing = f'role.rbac.authorization.k8s.io "{name}" not found'
        if found is None:
            return [], missing
        return list(found.obj.get("rules") or []), ""

    def _grants(self, user: User, namespace: str) -> list[tuple[str, list[Mapping[str, Any]], str]]:
        """(description, rules, error) for every binding that names `user`."""
        grants = []
        bindings = [
            ("ClusterRoleBinding", b, "")
            for b in self._objects("rbac.authorization.k8s.io/v1/clusterrolebindings")
        ]
        if namespace:
            bindings += [
                ("RoleBinding", b, namespace)
                for b in self._objects("rbac.authorization.k8s.io/v1/rolebindings", namespace)
            ]
        for kind, binding, scope in bindings:
            subject = next(
                (s for s in binding.get("subjects") or [] if _subject_matches(s, user, scope)), None
            )
            if subject is None:
                continue
            ref = binding.get("roleRef") or {}
            rules, error = self._role(ref, scope)
            name = binding["metadata"]["name"]
            shown = f"{name}/{scope}" if scope else name
            description = (
                f'{kind} "{shown}" of {ref.get("kind", "")} "{ref.get("name", "")}" '
                f"to {_describe_subject(subject, scope)}"
            )
            grants.append((description, rules, error))
        return grants

    def rules_for(self, user: User, namespace: str) -> list[Mapping[str, Any]]:
        """The rules that apply to `user` in `namespace` (cluster-wide ones included)."""
        return [rule for _, rules, _ in self._grants(user, namespace) for rule in rules]

    def decide(self, attrs: Attributes) -> Decision:
        user = attrs.user
        if MASTERS in user.groups:
            return Decision(True)
        if not attrs.resource_request and attrs.verb == "get":
            if _path_matches(_PUBLIC_PATHS, attrs.path):
                return Decision(True)
            if AUTHENTICATED in user.groups and _path_matches(_DISCOVERY_PATHS, attrs.path):
                return Decision(True)
        if (
            attrs.resource_request
            and attrs.verb == "create"
            and (attrs.api_group, attrs.resource) in _SELF_REVIEWS
            and AUTHENTICATED in user.groups
        ):
            return Decision(True)
        errors = []
        for description, rules, error in self._grants(user, attrs.namespace):
            if any(rule_allows(rule, attrs) for rule in rules):
                return Decision(True, f"RBAC: allowed by {description}")
            if error:
                errors.append(error)
        return Decision(False, f"RBAC: {', '.join(errors)}" if errors else "")

    def authorize(self, attrs: Attributes) -> bool:
        return self.decide(attrs).allowed


BOOTSTRAP_RESOURCE_RULES = (
    {
        "verbs": ["create"],
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
    },
    {
        "verbs": ["create"],
        "apiGroups": ["authentication.k8s.io"],
        "resources": ["selfsubjectreviews"],
    },
)
BOOTSTRAP_NON_RESOURCE_RULES = (
    {"verbs": ["get"], "nonResourceURLs": sorted({*_DISCOVERY_PATHS, *_PUBLIC_PATHS})},
)
