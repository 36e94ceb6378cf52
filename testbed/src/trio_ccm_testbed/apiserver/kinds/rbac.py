"""rbac.authorization.k8s.io/v1: Role, ClusterRole, RoleBinding, ClusterRoleBinding.

Names follow ValidateRBACName (path segments: colons allowed); `roleRef` is immutable.
"""

from __future__ import annotations

from trio_ccm_testbed.apiserver import fielderrors as fe
from trio_ccm_testbed.apiserver.fielderrors import FieldError
from trio_ccm_testbed.apiserver.kinds.base import (
    Obj,
    ResourceType,
    Strategy,
)


def _path_segment_name(name: str) -> list[str]:
    """ValidateRBACName (path.IsValidPathSegmentName): RBAC names may hold colons, as in
    `system:controller:node-controller`; only `.`, `..`, `/` and `%` are refused."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{part}'" for part in ("/", "%") if part in name]


class RoleStrategy(Strategy):
    name_validator = staticmethod(_path_segment_name)

    def validate(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        rules = obj.get("rules") or []
        for i, rule in enumerate(rules if isinstance(rules, list) else []):
            path = f"rules[{i}]"
            if not isinstance(rule, dict):
                errs.append(fe.invalid(path, rule, "must be an object"))
                continue
            if not rule.get("verbs"):
                errs.append(fe.required(f"{path}.verbs", "verbs must contain at least one value"))
            if rule.get("nonResourceURLs"):
                if obj["metadata"].get("namespace"):
                    errs.append(
                        fe.invalid(
                            f"{path}.nonResourceURLs",
                            rule["nonResourceURLs"],
                            "namespaced rules cannot apply to non-resource URLs",
                        )
                    )
                if rule.get("resources") or rule.get("apiGroups"):
                    errs.append(
                        fe.invalid(
                            f"{path}.nonResourceURLs",
                            rule["nonResourceURLs"],
                            "rules cannot apply to both regular resources and non-resource URLs",
                        )
                    )
            elif not rule.get("resources"):
                errs.append(
                    fe.required(
                        f"{path}.resources", "resource rules must supply at least one resource"
                    )
                )
        return errs


class BindingStrategy(Strategy):
    name_validator = staticmethod(_path_segment_name)

    def validate(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        ref = obj.get("roleRef")
        if not isinstance(ref, dict):
            return [fe.required("roleRef")]
        if ref.get("apiGroup") != "rbac.authorization.k8s.io":
            errs.append(
                fe.not_supported(
                    "roleRef.apiGroup", ref.get("apiGroup", ""), ("rbac.authorization.k8s.io",)
                )
            )
        allowed = ("ClusterRole", "Role") if obj["metadata"].get("namespace") else ("ClusterRole",)
        if ref.get("kind") not in allowed:
            errs.append(fe.not_supported("roleRef.kind", ref.get("kind", ""), allowed))
        if not ref.get("name"):
            errs.append(fe.required("roleRef.name"))
        for i, subject in enumerate(obj.get("subjects") or []):
            path = f"subjects[{i}]"
            kind = subject.get("kind", "") if isinstance(subject, dict) else ""
            if kind not in ("Group", "ServiceAccount", "User"):
                errs.append(
                    fe.not_supported(f"{path}.kind", kind, ("Group", "ServiceAccount", "User"))
                )
            elif not subject.get("name"):
                errs.append(fe.required(f"{path}.name"))
            elif kind == "ServiceAccount" and not subject.get("namespace"):
                errs.append(fe.required(f"{path}.namespace"))
        return errs

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        if new.get("roleRef") != old.get("roleRef"):
            return [fe.invalid("roleRef", new.get("roleRef"), "cannot change roleRef")]
        return []


def types() -> list[ResourceType]:
    """rbac.authorization.k8s.io/v1 kinds."""
    return [
        ResourceType(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            "clusterrole",
            False,
            RoleStrategy(),
            printer="role",
        ),
        ResourceType(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            "clusterrolebinding",
            False,
            BindingStrategy(),
            printer="clusterrolebinding",
        ),
        ResourceType(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
            "roles",
            "role",
            True,
            RoleStrategy(),
            printer="role",
        ),
        ResourceType(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            "rolebinding",
            True,
            BindingStrategy(),
            printer="rolebinding",
        ),
    ]
