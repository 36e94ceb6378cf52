"""Transcribe the emulator's API schema table from upstream's Go API types.

The emulator keeps ONE schema source, `testbed/src/trio_ccm_testbed/apiserver/schema/*.json`: for
every definition the served kinds reach, its description, its properties (JSON name, type,
format, enum, list and map types, merge keys, whether required) and, per property, the
protobuf field number and whether the Go field is a pointer. Its OpenAPI v2/v3 documents,
its protobuf decoder, server-side apply and field validation all read that table.

This tool reads the facts from the Go types of kubernetes/api and kubernetes/apimachinery
(struct tags and doc comments), the way upstream's openapi-gen does:

- a description is the doc comment as openapi-gen formats it (generator markers `+...` and
  one-line TODOs dropped, paragraphs kept, indented lines kept on their own lines);
- a field is required when its JSON tag has no `omitempty` and it carries no `+optional`;
- an enum type (`+enum`) lists its constants, and a field of it gets them as `enum` plus
  a "Possible enum values" paragraph built from the constants' comments.

Usage (with the two repositories' git directories at hand, e.g. from `fetch`):

    python tools/kube_schema.py --api /path/kubernetes+api/repo \
        --apimachinery /path/kubernetes+apimachinery/repo --tag v0.33.9 \
        --out testbed/src/trio_ccm_testbed/apiserver/schema/kubernetes-1.33.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

API = "k8s.io/api"
MACHINERY = "k8s.io/apimachinery"

# The served kinds (and the kinds of their subresources), by Go package and type name.
ROOTS: tuple[tuple[str, str, str, str], ...] = (
    # (package, type, group, version)
    (f"{API}/core/v1", "Namespace", "", "v1"),
    (f"{API}/core/v1", "Node", "", "v1"),
    (f"{API}/core/v1", "Service", "", "v1"),
    (f"{API}/core/v1", "ConfigMap", "", "v1"),
    (f"{API}/core/v1", "Secret", "", "v1"),
    (f"{API}/core/v1", "ServiceAccount", "", "v1"),
    (f"{API}/core/v1", "Pod", "", "v1"),
    (f"{API}/core/v1", "Event", "", "v1"),
    (f"{API}/events/v1", "Event", "events.k8s.io", "v1"),
    (f"{API}/coordination/v1", "Lease", "coordination.k8s.io", "v1"),
    (f"{API}/rbac/v1", "Role", "rbac.authorization.k8s.io", "v1"),
    (f"{API}/rbac/v1", "ClusterRole", "rbac.authorization.k8s.io", "v1"),
    (f"{API}/rbac/v1", "RoleBinding", "rbac.authorization.k8s.io", "v1"),
    (f"{API}/rbac/v1", "ClusterRoleBinding", "rbac.authorization.k8s.io", "v1"),
    (f"{API}/apps/v1", "Deployment", "apps", "v1"),
    (f"{API}/apps/v1", "DaemonSet", "apps", "v1"),
    (f"{API}/autoscaling/v1", "Scale", "autoscaling", "v1"),
    (f"{API}/authentication/v1", "TokenRequest", "authentication.k8s.io", "v1"),
    (f"{API}/authentication/v1", "TokenReview", "authentication.k8s.io", "v1"),
    (f"{API}/authentication/v1", "SelfSubjectReview", "authentication.k8s.io", "v1"),
    (f"{API}/authentication/v1beta1", "SelfSubjectReview", "authentication.k8s.io", "v1beta1"),
    (f"{API}/authentication/v1alpha1", "SelfSubjectReview", "authentication.k8s.io", "v1alpha1"),
    (f"{API}/authorization/v1", "SelfSubjectAccessReview", "authorization.k8s.io", "v1"),
    (f"{API}/authorization/v1", "SubjectAccessReview", "authorization.k8s.io", "v1"),
    (f"{API}/authorization/v1", "SelfSubjectRulesReview", "authorization.k8s.io", "v1"),
)
# List kinds, and meta types every group-version document refers to.
LISTS = (
    "Namespace",
    "Node",
    "Service",
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "Pod",
    "Event",
    "Lease",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "Deployment",
    "DaemonSet",
)
META_ROOTS = ("Status", "DeleteOptions", "WatchEvent", "Patch", "APIResourceList")

# Where each Go package lives: (repository, directory).
PACKAGES = {
    f"{API}/core/v1": ("api", "core/v1"),
    f"{API}/events/v1": ("api", "events/v1"),
    f"{API}/coordination/v1": ("api", "coordination/v1"),
    f"{API}/rbac/v1": ("api", "rbac/v1"),
    f"{API}/apps/v1": ("api", "apps/v1"),
    f"{API}/autoscaling/v1": ("api", "autoscaling/v1"),
    f"{API}/authentication/v1": ("api", "authentication/v1"),
    f"{API}/authentication/v1beta1": ("api", "authentication/v1beta1"),
    f"{API}/authentication/v1alpha1": ("api", "authentication/v1alpha1"),
    f"{API}/authorization/v1": ("api", "authorization/v1"),
    f"{MACHINERY}/pkg/apis/meta/v1": ("apimachinery", "pkg/apis/meta/v1"),
    f"{MACHINERY}/pkg/api/resource": ("apimachinery", "pkg/api/resource"),
    f"{MACHINERY}/pkg/util/intstr": ("apimachinery", "pkg/util/intstr"),
    f"{MACHINERY}/pkg/runtime": ("apimachinery", "pkg/runtime"),
}

# Types with a custom OpenAPI form (their OpenAPISchemaType/Format methods) and a custom
# protobuf encoding (decoded by the emulator's protobuf module by name).
SPECIAL: dict[tuple[str, str], dict[str, Any]] = {
    (f"{MACHINERY}/pkg/apis/meta/v1", "Time"): {"type": "string", "format": "date-time"},
    (f"{MACHINERY}/pkg/apis/meta/v1", "MicroTime"): {"type": "string", "format": "date-time"},
    (f"{MACHINERY}/pkg/apis/meta/v1", "Duration"): {"type": "string"},
    (f"{MACHINERY}/pkg/apis/meta/v1", "FieldsV1"): {"type": "object"},
    # OpenAPIV3OneOfTypes: v3 documents give these two as oneOf, v2 as a string.
    (f"{MACHINERY}/pkg/api/resource", "Quantity"): {
        "type": "string",
        "x-v3-one-of": ["string", "number"],
    },
    (f"{MACHINERY}/pkg/util/intstr", "IntOrString"): {
        "type": "string",
        "format": "int-or-string",
        "x-v3-one-of": ["integer", "string"],
    },
    (f"{MACHINERY}/pkg/runtime", "RawExtension"): {"type": "object"},
}
SCALARS = {
    "string": ("string", None),
    "bool": ("boolean", None),
    "int": ("integer", "int32"),
    "int32": ("integer", "int32"),
    "int64": ("integer", "int64"),
    "uint32": ("integer", "int32"),
    "uint64": ("integer", "int64"),
    "float64": ("number", "double"),
    "float32": ("number", "float"),
}


def definition_name(package: str, name: str) -> str:
    """openapi-gen's name: the package path with its domain reversed, then the type."""
    domain, _, rest = package.partition("/")
    reversed_domain = ".".join(reversed(domain.split(".")))
    return f"{reversed_domain}.{rest.replace('/', '.')}.{name}"


# -- reading Go --------------------------------------------------------------------------
@dataclass
class GoField:
    name: str  # Go name ("" for an embedded field)
    gotype: str
    tags: dict[str, str]
    comments: list[str]


@dataclass
class GoType:
    package: str
    name: str
    comments: list[str]
    fields: list[GoField] | None = None  # a struct
    underlying: str | None = None  # `type X string`, `type X []string`, ...
    imports: dict[str, str] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)  # fields this reader cannot parse


@dataclass
class GoPackage:
    path: str
    types: dict[str, GoType] = field(default_factory=dict)
    # type name -> [(value, constant name, comment)]
    constants: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)


_TAG = re.compile(r'(\w+):"((?:[^"\\]|\\.)*)"')
_FIELD = re.compile(r"^\s*(?:(\w+)\s+)?([\w.\[\]*{}]+)(?:\s+`([^`]*)`)?\s*(?://.*)?$")
_CONST = re.compile(r'^\s*(\w+)\s+(\w+)\s*=\s*"([^"]*)"')


def _comment_text(lines: list[str]) -> list[str]:
    """go/ast CommentGroup.Text(): markers and one leading space removed, outer blanks cut."""
    out = []
    for line in lines:
        text = line.strip()[2:]
        out.append(text[1:] if text.startswith(" ") else text)
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    return [line.rstrip() for line in out]


def _imports(source: str) -> dict[str, str]:
    found: dict[str, str] = {}
    block = re.search(r"^import \((.*?)^\)", source, re.S | re.M)
    lines = block.group(1).splitlines() if block else []
    lines += [
        m.group(1) for m in re.finditer(r"^import (.+)$", source, re.M) if "(" not in m.group(1)
    ]
    for line in lines:
        m = re.match(r'\s*(\w+)?\s*"([^"]+)"', line)
        if m:
            path = m.group(2)
            found[m.group(1) or path.rsplit("/", 1)[-1]] = path
    return found


def parse_package(path: str, sources: list[str]) -> GoPackage:
    package = GoPackage(path)
    for source in sources:
        imports = _imports(source)
        lines = source.splitlines()
        comments: list[str] = []
        i = 0
        while i < len(lines):
            line = lines[i]
            stripped = line.strip()
            if stripped.startswith("//"):
                comments.append(line)
                i += 1
                continue
            if m := re.match(r"^type (\w+) struct \{\s*$", line):
                gotype = GoType(path, m.group(1), _comment_text(comments), [], imports=imports)
                i += 1
                member_comments: list[str] = []
                while not lines[i].startswith("}"):
                    member = lines[i]
                    if member.strip().startswith("/*"):
                        while "*/" not in lines[i]:
                            i += 1
                        member_comments = []
                    elif member.strip().startswith("//"):
                        member_comments.append(member)
                    elif not member.strip():
                        member_comments = []
                    elif fm := _FIELD.match(member):
                        assert gotype.fields is not None
                        gotype.fields.append(
                            GoField(
                                fm.group(1) or "",
                                fm.group(2),
                                dict(_TAG.findall(fm.group(3) or "")),
                                _comment_text(member_comments),
                            )
                        )
                        member_comments = []
                    else:
                        gotype.unreadable.append(member.strip())
                    i += 1
                package.types[gotype.name] = gotype
            elif m := re.match(r"^type (\w+) struct\s*\{\}\s*$", line):
                package.types[m.group(1)] = GoType(
                    path, m.group(1), _comment_text(comments), [], imports=imports
                )
            elif m := re.match(r"^type (\w+) ([\w.\[\]*]+)\s*(?://.*)?$", line):
                package.types[m.group(1)] = GoType(
                    path,
                    m.group(1),
                    _comment_text(comments),
                    underlying=m.group(2),
                    imports=imports,
                )
            elif line.startswith("const ("):
                i += 1
                const_comments: list[str] = []
                while not lines[i].startswith(")"):
                    member = lines[i]
                    if member.strip().startswith("//"):
                        const_comments.append(member)
                    elif cm := _CONST.match(member):
                        text = " ".join(_comment_text(const_comments))
                        package.constants.setdefault(cm.group(2), []).append(
                            (cm.group(3), cm.group(1), text)
                        )
                        const_comments = []
                    elif not member.strip():
                        const_comments = []
                    else:
                        const_comments = []
                    i += 1
            elif cm := re.match(r'^const (\w+)\s+(\w+)\s*=\s*"([^"]*)"', line):
                text = " ".join(_comment_text(comments))
                package.constants.setdefault(cm.group(2), []).append(
                    (cm.group(3), cm.group(1), text)
                )
            comments = []
            i += 1
    return package


# -- openapi-gen's formatting -------------------------------------------------------------
def describe(lines: list[str], extra: tuple[str, ...] | list[str] = ()) -> str:
    """openapi-gen's generateDescription."""
    buffer = ""
    for raw in [*lines, *extra]:
        if raw == "---":
            break
        line = raw.rstrip(" ")
        leading = line.lstrip(" ")
        if not line:
            buffer = buffer[:-1] + "\n\n"
        elif leading.startswith(("TODO", "+")):
            continue
        elif line.startswith((" ", "\t")):
            buffer = buffer[:-1] + "\n" + line + "\n"
        else:
            buffer += line + " "
    return buffer.strip("\n").strip(" ")


def markers(lines: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in lines:
        m = re.match(r"^\s*\+([\w.:-]+)(?:=(.*))?$", line)
        if m:
            found.setdefault(m.group(1), []).append((m.group(2) or "").strip())
    return found


# -- the table ----------------------------------------------------------------------------
class Transcriber:
    def __init__(self, packages: dict[str, GoPackage]) -> None:
        self.packages = packages
        self.definitions: dict[str, dict[str, Any]] = {}
        self.queue: list[tuple[str, str]] = []

    def resolve(self, gotype: GoType, name: str) -> tuple[str, str]:
        """(package, type name) of a type named in `gotype`'s file."""
        if "." in name:
            alias, _, short = name.partition(".")
            return gotype.imports[alias], short
        return gotype.package, name

    def lookup(self, package: str, name: str) -> GoType:
        try:
            return self.packages[package].types[name]
        except KeyError:
            raise KeyError(f"type {package}.{name} not found") from None

    def enum_of(self, package: str, name: str) -> list[tuple[str, str]] | None:
        go = self.packages[package].types.get(name)
        if go is None or "enum" not in markers(go.comments):
            return None
        values = []
        for value, const, comment in self.packages[package].constants.get(name, []):
            text = comment.strip()
            if text.startswith(const):
                text = text[len(const) :]
            values.append((value, re.sub(r"\s+", " ", text.strip())))
        return sorted(set(values))

    def shape(self, owner: GoType, gotype: str) -> dict[str, Any]:
        """The schema of a Go type expression (pointers are the caller's business)."""
        gotype = gotype.lstrip("*")
        if gotype == "[]byte":
            return {"type": "string", "format": "byte"}
        if gotype.startswith("[]"):
            return {"type": "array", "items": self.shape(owner, gotype[2:])}
        if gotype.startswith("map["):
            value = gotype[gotype.index("]") + 1 :]
            return {"type": "object", "additionalProperties": self.shape(owner, value)}
        if gotype in SCALARS:
            kind, fmt = SCALARS[gotype]
            return {"type": kind, **({"format": fmt} if fmt else {})}
        package, name = self.resolve(owner, gotype)
        if (package, name) == ("k8s.io/apimachinery/pkg/types", "UID"):
            return {"type": "string"}
        if (package, name) in SPECIAL:
            return self.ref(package, name)
        go = self.lookup(package, name)
        if go.underlying is not None:
            inner = self.shape(go, go.underlying)
            if go.underlying.startswith("[]") and go.underlying != "[]byte":
                inner["x-proto-wrapped"] = True  # a named slice: a message with `items = 1`
            values = self.enum_of(package, name)
            if values:
                inner["enum"] = [v for v, _ in values]
                inner["x-enum-descriptions"] = [
                    f" - `{json.dumps(v)}`" + (f" {c}" if c else "") for v, c in values
                ]
            return inner
        return self.ref(package, name)

    def ref(self, package: str, name: str) -> dict[str, Any]:
        key = definition_name(package, name)
        if key not in self.definitions and (package, name) not in self.queue:
            self.queue.append((package, name))
        return {"$ref": key}

    def build(self, package: str, name: str) -> None:
        key = definition_name(package, name)
        go = self.lookup(package, name)
        definition: dict[str, Any] = {"description": describe(go.comments)}
        if (package, name) in SPECIAL:
            definition.update(SPECIAL[(package, name)])
            self.definitions[key] = definition
            return
        if go.unreadable:
            raise ValueError(f"{package}.{name}: cannot read fields {go.unreadable}")
        definition["type"] = "object"
        type_markers = markers(go.comments)
        if type_markers.get("structType") == ["atomic"]:
            definition["x-kubernetes-map-type"] = "atomic"
        properties: dict[str, Any] = {}
        required: list[str] = []
        inline: list[dict[str, Any]] = []
        assert go.fields is not None
        for member in go.fields:
            json_tag = member.tags.get("json", "")
            json_name, _, options = json_tag.partition(",")
            proto = member.tags.get("protobuf", "")
            proto_parts = proto.split(",") if proto else []
            number = int(proto_parts[1]) if len(proto_parts) > 1 else None
            if json_name == "-" or (member.name and not member.name[0].isupper()):
                continue
            if (not member.name and not json_name) or "inline" in options.split(","):
                sub_package, sub_name = self.resolve(go, member.gotype)
                if (sub_package, sub_name) == (f"{MACHINERY}/pkg/apis/meta/v1", "TypeMeta"):
                    inline.append(
                        {"$ref": definition_name(sub_package, sub_name), "typeMeta": True}
                    )
                    self.ref(sub_package, sub_name)
                    continue
                inline.append(
                    {**self.ref(sub_package, sub_name), **({"proto": number} if number else {})}
                )
                continue
            json_name = json_name or member.name
            member_markers = markers(member.comments)
            prop = self.shape(go, member.gotype)
            enum_lines = prop.pop("x-enum-descriptions", None)
            if prop.get("type") == "array" and "x-enum-descriptions" in prop.get("items", {}):
                enum_lines = prop["items"].pop("x-enum-descriptions")
            extra = ["", "Possible enum values:", *enum_lines] if enum_lines else []
            description = describe(member.comments, extra)
            if description:
                prop["description"] = description
            if member.gotype.startswith("*"):
                prop["x-pointer"] = True
            if number is not None:
                prop["x-proto"] = number
            for marker, extension in (
                ("listType", "x-kubernetes-list-type"),
                ("mapType", "x-kubernetes-map-type"),
            ):
                if marker in member_markers:
                    prop[extension] = member_markers[marker][0]
            if "default" in member_markers and not member_markers["default"][0].startswith("ref("):
                prop["default"] = json.loads(member_markers["default"][0])
            if "listMapKey" in member_markers:
                prop["x-kubernetes-list-map-keys"] = member_markers["listMapKey"]
            if "patchStrategy" in member.tags:
                prop["x-kubernetes-patch-strategy"] = member.tags["patchStrategy"]
            if "patchMergeKey" in member.tags:
                prop["x-kubernetes-patch-merge-key"] = member.tags["patchMergeKey"]
            omitempty = "omitempty" in options.split(",")
            if (not omitempty and "optional" not in member_markers) or "required" in member_markers:
                required.append(json_name)
            properties[json_name] = prop
        definition["properties"] = properties
        if required:
            definition["required"] = required
        if inline:
            definition["x-inline"] = inline
        self.definitions[key] = definition

    def run(self) -> None:
        while self.queue:
            self.build(*self.queue.pop(0))


def git_sources(repo: Path, tag: str, directory: str) -> list[str]:
    names = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "--name-only", tag, directory + "/"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    wanted = [
        n
        for n in names
        if n.endswith(".go")
        and not n.endswith("_test.go")
        and "generated" not in n
        and "zz_" not in n
        and "fuzz" not in n
    ]
    return [
        subprocess.run(
            ["git", "-C", str(repo), "show", f"{tag}:{n}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        for n in wanted
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api", type=Path, required=True, help="kubernetes/api git directory")
    parser.add_argument(
        "--apimachinery", type=Path, required=True, help="kubernetes/apimachinery git directory"
    )
    parser.add_argument("--tag", required=True, help="the release tag of both, e.g. v0.33.9")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    repos = {"api": args.api, "apimachinery": args.apimachinery}
    packages = {
        path: parse_package(path, git_sources(repos[repo], args.tag, directory))
        for path, (repo, directory) in PACKAGES.items()
    }
    transcriber = Transcriber(packages)
    kinds: dict[str, list[dict[str, str]]] = {}
    for package, name, group, version in ROOTS:
        transcriber.ref(package, name)
        kinds.setdefault(definition_name(package, name), []).append(
            {"group": group, "kind": name, "version": version}
        )
        if name in LISTS:
            transcriber.ref(package, f"{name}List")
            kinds.setdefault(definition_name(package, f"{name}List"), []).append(
                {"group": group, "kind": f"{name}List", "version": version}
            )
    meta = f"{MACHINERY}/pkg/apis/meta/v1"
    for name in META_ROOTS:
        transcriber.ref(meta, name)
    transcriber.run()
    for key, gvks in kinds.items():
        transcriber.definitions[key]["x-kubernetes-group-version-kind"] = gvks
    table = {
        "source": f"kubernetes/api and kubernetes/apimachinery {args.tag} (tools/kube_schema.py)",
        "definitions": dict(sorted(transcriber.definitions.items())),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(table, indent=1, sort_keys=False) + "\n")
    print(f"{len(table['definitions'])} definitions written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
