"""apps/v1 workloads: Deployment and DaemonSet.

Stored and validated only: no controller creates ReplicaSets or Pods for them, so their
status stays as created ({}) unless a client writes it through /status.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from trio_ccm_testbed.apiserver import fielderrors as fe
from trio_ccm_testbed.apiserver.fielderrors import FieldError
from trio_ccm_testbed.apiserver.kinds.base import (
    Obj,
    ResourceType,
    Strategy,
    get_path,
    is_int,
    messages,
)
from trio_ccm_testbed.apiserver.kinds.core import PodStrategy
from trio_ccm_testbed.apiserver.patch import MergeList
from trio_ccm_testbed.apiserver.selector import SelectorError, label_selector_from_object

_DNS_POLICIES = ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None")
_DEPLOYMENT_STRATEGIES = ("Recreate", "RollingUpdate")
_DAEMONSET_STRATEGIES = ("OnDelete", "RollingUpdate")
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_PROBE_DEFAULTS = {
    "timeoutSeconds": 1,
    "periodSeconds": 10,
    "successThreshold": 1,
    "failureThreshold": 3,
}


def _dicts(value: Any) -> list[Obj]:
    """The object elements of a list field (anything else is left to validation)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _default_container(container: Obj, host_network: bool) -> None:
    """SetDefaults_Container and friends (core/v1 defaults.go), for a pod template."""
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    image = str(container.get("image") or "")
    # Upstream: Always for an untagged or `:latest` image (a digest counts as pinned).
    tag = image.rpartition("/")[2].partition("@")[0]
    pinned = "@" in image or (":" in tag and not tag.endswith(":latest"))
    container.setdefault("imagePullPolicy", "IfNotPresent" if pinned else "Always")
    for port in _dicts(container.get("ports")):
        port.setdefault("protocol", "TCP")
        if host_network and "containerPort" in port:
            port.setdefault("hostPort", port["containerPort"])
    for name in _PROBES:
        probe = container.get(name)
        if not isinstance(probe, dict):
            continue
        for key, value in _PROBE_DEFAULTS.items():
            probe.setdefault(key, value)
        http_get = probe.get("httpGet")
        if isinstance(http_get, dict):
            http_get.setdefault("path", "/")
            http_get.setdefault("scheme", "HTTP")


def _default_pod_template(template: Any) -> None:
    """SetDefaults_PodSpec for a template (no service account: admission sets that on Pods)."""
    if not isinstance(template, dict):
        return
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    host_network = spec.get("hostNetwork") is True
    for section in ("initContainers", "containers"):
        for container in _dicts(spec.get(section)):
            _default_container(container, host_network)
    for volume in _dicts(spec.get("volumes")):
        for source in ("configMap", "secret"):
            if isinstance(volume.get(source), dict):
                volume[source].setdefault("defaultMode", 0o644)


def _pod_template_errors(template: Any, selector: Any, path: str) -> list[FieldError]:
    """ValidatePodTemplateSpecForReplicaSet: the labels match the selector, then the pod."""
    errs: list[FieldError] = []
    if not isinstance(template, dict):
        template = {}
    meta = template.get("metadata") or {}
    labels = (meta.get("labels") or {}) if isinstance(meta, dict) else {}
    try:
        errs += fe.validate_labels(labels, f"{path}.metadata.labels")
    except TypeError as exc:  # upstream refuses such a body while decoding it
        errs.append(fe.invalid(f"{path}.metadata.labels", labels, str(exc)))
        labels = {}
    try:
        chosen = label_selector_from_object(selector if isinstance(selector, dict) else None)
    except SelectorError:
        chosen = None  # reported on the selector itself
    if chosen is not None and not chosen.empty and not chosen.matches(labels):
        errs.append(
            fe.invalid(
                f"{path}.metadata.labels", labels, "`selector` does not match template `labels`"
            )
        )
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return [*errs, fe.required(f"{path}.spec.containers")]
    # The containers' checks are the Pod's, on the template's paths.
    errs += [
        dataclasses.replace(err, field=f"{path}.{err.field}")
        for err in PodStrategy().validate({"spec": spec})
    ]
    volumes: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        name = volume.get("name", "") if isinstance(volume, dict) else ""
        vpath = f"{path}.spec.volumes[{i}].name"
        if not name:
            errs.append(fe.required(vpath))
        elif name in volumes:
            errs.append(fe.duplicate(vpath, name))
        else:
            errs += messages(vpath, name, fe.is_dns1123_label(name))
        volumes.add(name)
    for section in ("initContainers", "containers"):
        for i, container in enumerate(_dicts(spec.get(section))):
            cpath = f"{path}.spec.{section}[{i}]"
            for j, mount in enumerate(_dicts(container.get("volumeMounts"))):
                mpath = f"{cpath}.volumeMounts[{j}]"
                if not mount.get("name"):
                    errs.append(fe.required(f"{mpath}.name"))
                elif mount["name"] not in volumes:
                    errs.append(fe.not_found(f"{mpath}.name", mount["name"]))
                if not mount.get("mountPath"):
                    errs.append(fe.required(f"{mpath}.mountPath"))
            for j, port in enumerate(_dicts(container.get("ports"))):
                number = port.get("containerPort")
                if not is_int(number) or not 1 <= number <= 65535:
                    errs.append(
                        fe.invalid(
                            f"{cpath}.ports[{j}].containerPort",
                            number,
                            "must be between 1 and 65535, inclusive",
                        )
                    )
    restart = spec.get("restartPolicy", "Always")
    if restart != "Always":
        errs.append(fe.not_supported(f"{path}.spec.restartPolicy", restart, ("Always",)))
    dns = spec.get("dnsPolicy", "ClusterFirst")
    if dns not in _DNS_POLICIES:
        errs.append(fe.not_supported(f"{path}.spec.dnsPolicy", dns, _DNS_POLICIES))
    if spec.get("activeDeadlineSeconds") is not None:
        errs.append(
            fe.forbidden(
                f"{path}.spec.activeDeadlineSeconds",
                "activeDeadlineSeconds in ReplicaSet is not Supported",
            )
        )
    return errs


def _non_negative(obj: Obj, path: str) -> list[FieldError]:
    value = get_path(obj, *path.split("."))
    if value is not None and (not is_int(value) or value < 0):
        return [fe.invalid(path, value, "must be greater than or equal to 0")]
    return []


class WorkloadStrategy(Strategy):
    """What Deployments and DaemonSets share: a selector, a pod template, a status."""

    status_subresource = True
    track_generation = True
    reset_status_on_create = True
    # Upstream's patchMergeKeys of PodTemplateSpec and the workload status.
    merge_schema: ClassVar[Mapping[str, MergeList]] = {
        "metadata.finalizers": MergeList(),
        "metadata.ownerReferences": MergeList(("uid",)),
        "spec.template.spec.containers": MergeList(("name",)),
        "spec.template.spec.containers[].ports": MergeList(
            ("containerPort", "protocol"), {"protocol": "TCP"}
        ),
        "spec.template.spec.containers[].env": MergeList(("name",)),
        "spec.template.spec.containers[].volumeMounts": MergeList(("mountPath",)),
        "spec.template.spec.initContainers": MergeList(("name",)),
        "spec.template.spec.initContainers[].env": MergeList(("name",)),
        "spec.template.spec.initContainers[].volumeMounts": MergeList(("mountPath",)),
        "spec.template.spec.volumes": MergeList(("name",)),
        "spec.template.spec.imagePullSecrets": MergeList(("name",)),
        "status.conditions": MergeList(("type",)),
    }
    # The word in "empty selector is invalid for <kind>".
    kind_word: ClassVar[str] = ""

    def prepare_create(self, obj: Obj) -> None:
        obj["status"] = {}

    def defaults(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            spec.setdefault("revisionHistoryLimit", 10)
            _default_pod_template(spec.get("template"))

    def validate(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [fe.required("spec")]
        errs: list[FieldError] = []
        selector = spec.get("selector")
        if selector is None:
            errs.append(fe.required("spec.selector"))
        elif not isinstance(selector, dict):
            errs.append(fe.invalid("spec.selector", selector, "must be a label selector"))
        else:
            try:
                label_selector_from_object(selector)
            except SelectorError as exc:
                errs.append(fe.invalid("spec.selector", selector, str(exc)))
            if not selector.get("matchLabels") and not selector.get("matchExpressions"):
                errs.append(
                    fe.invalid(
                        "spec.selector", selector, f"empty selector is invalid for {self.kind_word}"
                    )
                )
        errs += _pod_template_errors(spec.get("template"), selector, "spec.template")
        errs += _non_negative(obj, "spec.revisionHistoryLimit")
        errs += _non_negative(obj, "spec.minReadySeconds")
        return errs

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        selector = get_path(new, "spec", "selector")
        if selector != get_path(old, "spec", "selector"):
            return [fe.invalid("spec.selector", selector, "field is immutable")]
        return []


def _is_zero(value: Any) -> bool:
    return value in (0, "0", "0%")


class DeploymentStrategy(WorkloadStrategy):
    kind_word = "deployment"

    def defaults(self, obj: Obj) -> None:
        super().defaults(obj)
        spec = obj["spec"]
        if not isinstance(spec, dict):
            return
        spec.setdefault("replicas", 1)
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("maxUnavailable", "25%")
                    rolling.setdefault("maxSurge", "25%")

    def validate(self, obj: Obj) -> list[FieldError]:
        errs = _non_negative(obj, "spec.replicas") + super().validate(obj)
        if not isinstance(obj.get("spec"), dict):
            return errs
        strategy = get_path(obj, "spec", "strategy") or {}
        kind = strategy.get("type") if isinstance(strategy, dict) else None
        if kind not in _DEPLOYMENT_STRATEGIES:
            errs.append(fe.not_supported("spec.strategy.type", kind, _DEPLOYMENT_STRATEGIES))
        elif kind == "Recreate" and strategy.get("rollingUpdate") is not None:
            errs.append(
                fe.forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                )
            )
        elif kind == "RollingUpdate":
            rolling = strategy.get("rollingUpdate") or {}
            unavailable = rolling.get("maxUnavailable")
            if _is_zero(unavailable) and _is_zero(rolling.get("maxSurge")):
                errs.append(
                    fe.invalid(
                        "spec.strategy.rollingUpdate.maxUnavailable",
                        unavailable,
                        "may not be 0 when `maxSurge` is 0",
                    )
                )
        return errs


class DaemonSetStrategy(WorkloadStrategy):
    kind_word = "daemonset"

    def defaults(self, obj: Obj) -> None:
        super().defaults(obj)
        spec = obj["spec"]
        if not isinstance(spec, dict):
            return
        strategy = spec.setdefault("updateStrategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("maxUnavailable", 1)
                    rolling.setdefault("maxSurge", 0)

    def validate(self, obj: Obj) -> list[FieldError]:
        errs = super().validate(obj)
        if not isinstance(obj.get("spec"), dict):
            return errs
        strategy = get_path(obj, "spec", "updateStrategy") or {}
        kind = strategy.get("type") if isinstance(strategy, dict) else None
        if kind not in _DAEMONSET_STRATEGIES:
            errs.append(fe.not_supported("spec.updateStrategy.type", kind, _DAEMONSET_STRATEGIES))
        return errs


def types() -> list[ResourceType]:
    """apps/v1 kinds."""
    return [
        ResourceType(
            "apps",
            "v1",
            "DaemonSet",
            "daemonsets",
            "daemonset",
            True,
            DaemonSetStrategy(),
            short_names=("ds",),
            categories=("all",),
            subresources=("status",),
            printer="daemonset",
        ),
        ResourceType(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            "deployment",
            True,
            DeploymentStrategy(),
            short_names=("deploy",),
            categories=("all",),
            subresources=("status", "scale"),
            printer="deployment",
        ),
    ]
