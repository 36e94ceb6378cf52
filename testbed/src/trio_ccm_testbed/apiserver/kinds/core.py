"""The core/v1 kinds but Service: Namespace, Node, ConfigMap, Secret, ServiceAccount, Pod,
Event (Service, with its allocator, is `services.py`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import ipaddress
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from trio_ccm_testbed.apiserver import fielderrors as fe
from trio_ccm_testbed.apiserver.fielderrors import FieldError
from trio_ccm_testbed.apiserver.kinds.base import (
    Obj,
    ResourceType,
    Strategy,
    get_path,
    messages,
)
from trio_ccm_testbed.apiserver.patch import MergeList


# -- Namespace -------------------------------------------------------------------------
class NamespaceStrategy(Strategy):
    status_subresource = True
    name_validator = staticmethod(fe.is_dns1123_label)
    extra_field_labels = ("status.phase",)
    legacy_field_label_errors = True

    def prepare_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Active"}
        obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]

    def defaults(self, obj: Obj) -> None:
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]

    def field_labels(self, obj: Obj) -> dict[str, str]:
        labels = super().field_labels(obj)
        labels["status.phase"] = get_path(obj, "status", "phase") or ""
        return labels


# -- Node ------------------------------------------------------------------------------
_TAINT_EFFECTS = ("NoExecute", "NoSchedule", "PreferNoSchedule")
_ADDRESS_TYPES = ("ExternalDNS", "ExternalIP", "Hostname", "InternalDNS", "InternalIP")


def _pod_cidr_errors(cidrs: list[Any]) -> list[FieldError]:
    """ValidateNode's podCIDRs rules, in its order: each a CIDR; more than one only for
    dual stack (one IPv4, one IPv6); no duplicates."""
    errs: list[FieldError] = []
    for i, cidr in enumerate(cidrs):
        errs += messages(f"spec.podCIDRs[{i}]", cidr, fe.is_valid_cidr(str(cidr)))
    if len(cidrs) <= 1:
        return errs
    versions: set[int] = set()
    for cidr in cidrs:
        with contextlib.suppress(ValueError):
            versions.add(ipaddress.ip_network(str(cidr), strict=False).version)
    if len(cidrs) > 2 or versions != {4, 6}:
        errs.append(
            fe.invalid(
                "spec.podCIDRs", cidrs, "may specify no more than one CIDR for each IP family"
            )
        )
    seen: set[str] = set()
    for i, cidr in enumerate(cidrs):
        if str(cidr) in seen:
            errs.append(fe.duplicate(f"spec.podCIDRs[{i}]", cidr))
        seen.add(str(cidr))
    return errs


class NodeStrategy(Strategy):
    status_subresource = True
    extra_field_labels = ("spec.unschedulable",)
    legacy_field_label_errors = True
    merge_schema: ClassVar[Mapping[str, MergeList]] = {
        "metadata.finalizers": MergeList(),
        "metadata.ownerReferences": MergeList(("uid",)),
        "spec.podCIDRs": MergeList(),
        "status.conditions": MergeList(("type",)),
        "status.addresses": MergeList(("type",)),
        "status.volumesAttached": MergeList(("name",)),
    }

    def defaults(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        # `omitempty` in the Go types: an empty list is not stored (a JSON-patch `test` for
        # null then passes, as it does against a real API server).
        for name in ("taints", "podCIDRs"):
            if spec.get(name) == []:
                del spec[name]
        pod_cidr, pod_cidrs = spec.get("podCIDR"), spec.get("podCIDRs")
        if pod_cidr and not pod_cidrs:
            spec["podCIDRs"] = [pod_cidr]
        elif pod_cidrs and isinstance(pod_cidrs, list) and not pod_cidr:
            spec["podCIDR"] = pod_cidrs[0]
        elif pod_cidr and isinstance(pod_cidrs, list) and pod_cidrs[0] != pod_cidr:
            # v1 -> internal conversion: when both are given and differ, podCIDR wins.
            spec["podCIDRs"] = [pod_cidr]

    def validate(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        spec = obj.get("spec") or {}
        taints = spec.get("taints") or []
        if not isinstance(taints, list):
            return [fe.invalid("spec.taints", taints, "must be a list")]
        seen: set[tuple[str, str]] = set()
        for i, taint in enumerate(taints):
            path = f"spec.taints[{i}]"
            if not isinstance(taint, dict):
                errs.append(fe.invalid(path, taint, "must be an object"))
                continue
            key = taint.get("key", "")
            if not key:
                errs.append(fe.required(f"{path}.key"))
            else:
                errs += messages(f"{path}.key", key, fe.is_qualified_name(key))
            if taint.get("value"):
                errs += messages(
                    f"{path}.value", taint["value"], fe.is_valid_label_value(str(taint["value"]))
                )
            effect = taint.get("effect", "")
            if not effect:
                errs.append(fe.required(f"{path}.effect"))
            elif effect not in _TAINT_EFFECTS:
                errs.append(fe.not_supported(f"{path}.effect", effect, _TAINT_EFFECTS))
            if (key, effect) in seen:
                errs.append(fe.duplicate(f"{path}", f"{key}:{effect}"))
            seen.add((key, effect))
        errs += _pod_cidr_errors(spec.get("podCIDRs") or [])
        for i, addr in enumerate(get_path(obj, "status", "addresses") or []):
            kind = addr.get("type", "") if isinstance(addr, dict) else ""
            if kind not in _ADDRESS_TYPES:
                errs.append(fe.not_supported(f"status.addresses[{i}].type", kind, _ADDRESS_TYPES))
        return errs

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        old_id = get_path(old, "spec", "providerID") or ""
        if old_id and (get_path(new, "spec", "providerID") or "") != old_id:
            errs.append(
                fe.forbidden(
                    "spec.providerID",
                    'node updates may not change providerID except from "" to valid',
                )
            )
        old_cidrs = get_path(old, "spec", "podCIDRs") or []
        if old_cidrs and (get_path(new, "spec", "podCIDRs") or []) != old_cidrs:
            errs.append(
                fe.forbidden(
                    "spec.podCIDRs", 'node updates may not change podCIDR except from "" to valid'
                )
            )
        return errs

    def field_labels(self, obj: Obj) -> dict[str, str]:
        labels = super().field_labels(obj)
        labels["spec.unschedulable"] = "true" if get_path(obj, "spec", "unschedulable") else "false"
        return labels


# -- simple kinds ----------------------------------------------------------------------
class ConfigMapStrategy(Strategy):
    def validate(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        size = 0
        for section in ("data", "binaryData"):
            values = obj.get(section) or {}
            if not isinstance(values, dict):
                errs.append(fe.invalid(section, values, "must be a map"))
                continue
            for key, value in values.items():
                errs += messages(f"{section}[{key}]", key, _config_key(key))
                size += len(key) + len(str(value))
        if size > 1024 * 1024:
            errs.append(fe.too_long("", "", 1024 * 1024))
        return errs


def _config_key(key: str) -> list[str]:
    if not key or len(key) > 253 or not re.fullmatch(r"[-._a-zA-Z0-9]+", key) or key in (".", ".."):
        return [
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
            "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation "
            "is '[-._a-zA-Z0-9]+')"
        ]
    return []


class SecretStrategy(ConfigMapStrategy):
    extra_field_labels = ("type",)
    legacy_field_label_errors = True

    def defaults(self, obj: Obj) -> None:
        obj.setdefault("type", "Opaque")
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict):
            data = obj.setdefault("data", {})
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()

    def validate(self, obj: Obj) -> list[FieldError]:
        errs = super().validate(obj)
        for key, value in (obj.get("data") or {}).items():
            try:
                base64.b64decode(str(value), validate=True)
            except (binascii.Error, ValueError):
                errs.append(fe.invalid(f"data[{key}]", "<value omitted>", "must be base64-encoded"))
        return errs

    def field_labels(self, obj: Obj) -> dict[str, str]:
        labels = super().field_labels(obj)
        labels["type"] = obj.get("type", "")
        return labels


class ServiceAccountStrategy(Strategy):
    pass


class PodStrategy(Strategy):
    status_subresource = True
    track_generation = True
    reset_status_on_create = True
    extra_field_labels = (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    )
    legacy_field_label_errors = True
    merge_schema: ClassVar[Mapping[str, MergeList]] = {
        "metadata.finalizers": MergeList(),
        "metadata.ownerReferences": MergeList(("uid",)),
        "spec.containers": MergeList(("name",)),
        "spec.containers[].ports": MergeList(("containerPort", "protocol"), {"protocol": "TCP"}),
        "spec.containers[].env": MergeList(("name",)),
        "spec.initContainers": MergeList(("name",)),
        "spec.volumes": MergeList(("name",)),
        "spec.tolerations": MergeList(),
        "status.conditions": MergeList(("type",)),
    }

    def prepare_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}

    def defaults(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("serviceAccountName", "default")

    def validate(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        containers = get_path(obj, "spec", "containers")
        if not containers:
            return [fe.required("spec.containers")]
        names: set[str] = set()
        for i, container in enumerate(containers):
            path = f"spec.containers[{i}]"
            name = container.get("name", "") if isinstance(container, dict) else ""
            if not name:
                errs.append(fe.required(f"{path}.name"))
            elif name in names:
                errs.append(fe.duplicate(f"{path}.name", name))
            else:
                errs += messages(f"{path}.name", name, fe.is_dns1123_label(name))
            names.add(name)
            if isinstance(container, dict) and not container.get("image"):
                errs.append(fe.required(f"{path}.image"))
        return errs

    def field_labels(self, obj: Obj) -> dict[str, str]:
        labels = super().field_labels(obj)
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        for name in self.extra_field_labels:
            section, _, attr = name.partition(".")
            value = (spec if section == "spec" else status).get(attr, "")
            labels[name] = str(value).lower() if isinstance(value, bool) else str(value or "")
        return labels


class EventStrategy(Strategy):
    create_on_update = True
    extra_field_labels = (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    )
    legacy_field_label_errors = True

    def validate(self, obj: Obj) -> list[FieldError]:
        errs: list[FieldError] = []
        involved = obj.get("involvedObject") or {}
        namespace = obj["metadata"].get("namespace", "")
        involved_ns = involved.get("namespace", "")
        if involved_ns and involved_ns != namespace:
            errs.append(
                fe.invalid(
                    "involvedObject.namespace", involved_ns, "does not match event.namespace"
                )
            )
        kind = obj.get("type")
        if kind and kind not in ("Normal", "Warning"):
            errs.append(fe.not_supported("type", kind, ("Normal", "Warning")))
        return errs

    def field_labels(self, obj: Obj) -> dict[str, str]:
        labels = super().field_labels(obj)
        involved = obj.get("involvedObject") or {}
        for attr in (
            "kind",
            "namespace",
            "name",
            "uid",
            "apiVersion",
            "resourceVersion",
            "fieldPath",
        ):
            labels[f"involvedObject.{attr}"] = str(involved.get(attr, ""))
        labels["reason"] = obj.get("reason", "")
        labels["reportingComponent"] = obj.get("reportingComponent", "")
        labels["source"] = (obj.get("source") or {}).get("component", "")
        labels["type"] = obj.get("type", "")
        return labels


def types() -> list[ResourceType]:
    """The core/v1 kinds of this module."""
    return [
        ResourceType(
            "",
            "v1",
            "Namespace",
            "namespaces",
            "namespace",
            False,
            NamespaceStrategy(),
            short_names=("ns",),
            subresources=("status",),
            verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
            printer="namespace",
        ),
        ResourceType(
            "",
            "v1",
            "Node",
            "nodes",
            "node",
            False,
            NodeStrategy(),
            short_names=("no",),
            subresources=("status",),
            printer="node",
        ),
        ResourceType(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            "configmap",
            True,
            ConfigMapStrategy(),
            short_names=("cm",),
            printer="configmap",
        ),
        ResourceType(
            "", "v1", "Secret", "secrets", "secret", True, SecretStrategy(), printer="secret"
        ),
        ResourceType(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            "serviceaccount",
            True,
            ServiceAccountStrategy(),
            short_names=("sa",),
            subresources=("token",),
            printer="serviceaccount",
        ),
        ResourceType(
            "",
            "v1",
            "Pod",
            "pods",
            "pod",
            True,
            PodStrategy(),
            short_names=("po",),
            categories=("all",),
            subresources=("status",),
            printer="pod",
        ),
        ResourceType(
            "",
            "v1",
            "Event",
            "events",
            "event",
            True,
            EventStrategy(),
            short_names=("ev",),
            printer="event",
        ),
    ]
