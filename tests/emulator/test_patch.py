"""Tests for the emulator's patch engine: JSON merge patch, JSON patch, strategic merge patch."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_ccm_testbed.apiserver.patch import (
    MalformedPatchError,
    MergeList,
    PatchApplyError,
    PatchError,
    PatchSchema,
    json_merge_patch,
    json_patch,
    strategic_merge_patch,
)

# ---------------------------------------------------------------- RFC 7386 merge patch

RFC7386_APPENDIX_A = [
    pytest.param({"a": "b"}, {"a": "c"}, {"a": "c"}, id="replace-member"),
    pytest.param({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}, id="add-member"),
    pytest.param({"a": "b"}, {"a": None}, {}, id="remove-only-member"),
    pytest.param({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}, id="remove-one-member"),
    pytest.param({"a": ["b"]}, {"a": "c"}, {"a": "c"}, id="array-replaced-by-string"),
    pytest.param({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}, id="string-replaced-by-array"),
    pytest.param(
        {"a": {"b": "c"}},
        {"a": {"b": "d", "c": None}},
        {"a": {"b": "d"}},
        id="nested-replace-and-null",
    ),
    pytest.param({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}, id="array-replaced-whole"),
    pytest.param(["a", "b"], ["c", "d"], ["c", "d"], id="array-document-replaced"),
    pytest.param({"a": "b"}, ["c"], ["c"], id="object-replaced-by-array"),
    pytest.param({"a": "foo"}, None, None, id="null-patch-replaces"),
    pytest.param({"a": "foo"}, "bar", "bar", id="string-patch-replaces"),
    pytest.param({"e": None}, {"a": 1}, {"e": None, "a": 1}, id="target-null-kept"),
    pytest.param([1, 2], {"a": "b", "c": None}, {"a": "b"}, id="array-target-becomes-object"),
    pytest.param({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}, id="nested-null-in-new"),
]


@pytest.mark.parametrize(("target", "patch", "expected"), RFC7386_APPENDIX_A)
def test_json_merge_patch_rfc7386_appendix_a(target: Any, patch: Any, expected: Any) -> None:
    """Every example of RFC 7386 appendix A gives the documented result."""
    assert json_merge_patch(target, patch) == expected


MERGE_PATCH_KUBERNETES = [
    pytest.param(
        {"metadata": {"labels": {"a": "1", "b": "2"}}},
        {"metadata": {"labels": {"a": None, "c": "3"}}},
        {"metadata": {"labels": {"b": "2", "c": "3"}}},
        id="labels-add-and-remove",
    ),
    pytest.param(
        {"metadata": {"finalizers": ["a", "b"]}},
        {"metadata": {"finalizers": ["c"]}},
        {"metadata": {"finalizers": ["c"]}},
        id="lists-never-merge",
    ),
    pytest.param(
        {"spec": {}},
        {"spec": {"items": [{"a": None}, None]}},
        {"spec": {"items": [{"a": None}, None]}},
        id="array-contents-kept-verbatim",
    ),
    pytest.param(
        {"metadata": {"name": "x"}},
        {"metadata": {"missing": None}},
        {"metadata": {"name": "x"}},
        id="null-for-absent-key-is-noop",
    ),
]


@pytest.mark.parametrize(("target", "patch", "expected"), MERGE_PATCH_KUBERNETES)
def test_json_merge_patch_kubernetes_shapes(target: Any, patch: Any, expected: Any) -> None:
    """Merge patches of the shapes controllers send behave as RFC 7386 says."""
    assert json_merge_patch(target, patch) == expected


# ------------------------------------------------------------------ RFC 6902 JSON patch

RFC6902_APPENDIX_A = [
    pytest.param(
        {"foo": "bar"},
        [{"op": "add", "path": "/baz", "value": "qux"}],
        {"baz": "qux", "foo": "bar"},
        id="a1-add-object-member",
    ),
    pytest.param(
        {"foo": ["bar", "baz"]},
        [{"op": "add", "path": "/foo/1", "value": "qux"}],
        {"foo": ["bar", "qux", "baz"]},
        id="a2-add-array-element",
    ),
    pytest.param(
        {"baz": "qux", "foo": "bar"},
        [{"op": "remove", "path": "/baz"}],
        {"foo": "bar"},
        id="a3-remove-object-member",
    ),
    pytest.param(
        {"foo": ["bar", "qux", "baz"]},
        [{"op": "remove", "path": "/foo/1"}],
        {"foo": ["bar", "baz"]},
        id="a4-remove-array-element",
    ),
    pytest.param(
        {"baz": "qux", "foo": "bar"},
        [{"op": "replace", "path": "/baz", "value": "boo"}],
        {"baz": "boo", "foo": "bar"},
        id="a5-replace-value",
    ),
    pytest.param(
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
        {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
        id="a6-move-value",
    ),
    pytest.param(
        {"foo": ["all", "grass", "cows", "eat"]},
        [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
        {"foo": ["all", "cows", "eat", "grass"]},
        id="a7-move-array-element",
    ),
    pytest.param(
        {"baz": "qux", "foo": ["a", 2, "c"]},
        [
            {"op": "test", "path": "/baz", "value": "qux"},
            {"op": "test", "path": "/foo/1", "value": 2},
        ],
        {"baz": "qux", "foo": ["a", 2, "c"]},
        id="a8-test-success",
    ),
    pytest.param(
        {"foo": "bar"},
        [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
        {"foo": "bar", "child": {"grandchild": {}}},
        id="a10-add-nested-object",
    ),
    pytest.param(
        {"foo": "bar"},
        [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
        {"foo": "bar", "baz": "qux"},
        id="a11-unrecognized-members-ignored",
    ),
    pytest.param(
        {"/": 9, "~1": 10},
        [{"op": "test", "path": "/~01", "value": 10}],
        {"/": 9, "~1": 10},
        id="a14-escape-ordering",
    ),
    pytest.param(
        {"foo": ["bar"]},
        [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
        {"foo": ["bar", ["abc", "def"]]},
        id="a16-add-array-value",
    ),
]
# A.13 (an operation object with a duplicated "op" member) cannot be written as a Python
# dict, so it has no case here; by the time JSON reaches us the duplicate is gone.


@pytest.mark.parametrize(("target", "operations", "expected"), RFC6902_APPENDIX_A)
def test_json_patch_rfc6902_appendix_a(target: Any, operations: Any, expected: Any) -> None:
    """Every successful example of RFC 6902 appendix A gives the documented result."""
    assert json_patch(target, operations) == expected


RFC6902_APPENDIX_A_ERRORS = [
    pytest.param(
        {"baz": "qux"},
        [{"op": "test", "path": "/baz", "value": "bar"}],
        "testing value /baz failed: test failed",
        id="a9-test-error",
    ),
    pytest.param(
        {"foo": "bar"},
        [{"op": "add", "path": "/baz/bat", "value": "qux"}],
        'add operation does not apply: doc is missing path: "/baz/bat": missing value',
        id="a12-add-to-nonexistent-target",
    ),
    pytest.param(
        {"/": 9, "~1": 10},
        [{"op": "test", "path": "/~01", "value": "10"}],
        "testing value /~01 failed: test failed",
        id="a15-string-is-not-number",
    ),
]


@pytest.mark.parametrize(("target", "operations", "message"), RFC6902_APPENDIX_A_ERRORS)
def test_json_patch_rfc6902_appendix_a_errors(target: Any, operations: Any, message: str) -> None:
    """The failing examples of RFC 6902 appendix A raise PatchApplyError with v4's text."""
    with pytest.raises(PatchApplyError) as excinfo:
        json_patch(target, operations)
    assert excinfo.value.message == message


JSON_PATCH_BEHAVIOUR = [
    pytest.param(
        {"metadata": {"annotations": {"example.com/owner": "a", "x~y": "b"}}},
        [
            {"op": "replace", "path": "/metadata/annotations/example.com~1owner", "value": "c"},
            {"op": "remove", "path": "/metadata/annotations/x~0y"},
        ],
        {"metadata": {"annotations": {"example.com/owner": "c"}}},
        id="pointer-escapes",
    ),
    pytest.param(
        {"metadata": {"finalizers": ["a"]}},
        [{"op": "add", "path": "/metadata/finalizers/-", "value": "b"}],
        {"metadata": {"finalizers": ["a", "b"]}},
        id="dash-appends",
    ),
    pytest.param(
        {"l": [1, 2]},
        [{"op": "add", "path": "/l/0", "value": 0}, {"op": "add", "path": "/l/3", "value": 3}],
        {"l": [0, 1, 2, 3]},
        id="insert-at-front-and-end",
    ),
    pytest.param(
        {"l": [1, 2, 3]},
        [{"op": "remove", "path": "/l/-1"}, {"op": "replace", "path": "/l/-2", "value": 9}],
        {"l": [9, 2]},
        id="v4-negative-indices",
    ),
    pytest.param(
        {"l": [[1, 2]]},
        [{"op": "add", "path": "/l/0/1", "value": 5}],
        {"l": [[1, 5, 2]]},
        id="nested-array-index",
    ),
    pytest.param(
        {"spec": {"replicas": 1, "ratio": 0.5}},
        [
            {"op": "test", "path": "/spec/replicas", "value": 1.0},
            {"op": "test", "path": "/spec/ratio", "value": 0.5},
        ],
        {"spec": {"replicas": 1, "ratio": 0.5}},
        id="numbers-1-and-1.0-equal",
    ),
    pytest.param(
        {"a": {"x": [1, {"y": None}]}},
        [{"op": "test", "path": "/a", "value": {"x": [1.0, {"y": None}]}}],
        {"a": {"x": [1, {"y": None}]}},
        id="test-deep-equality",
    ),
    pytest.param(
        {"a": 1, "b": None},
        [
            {"op": "test", "path": "/missing", "value": None},
            {"op": "test", "path": "/b", "value": None},
        ],
        {"a": 1, "b": None},
        id="v4-test-null-matches-missing",
    ),
    pytest.param(
        {"metadata": {}},
        [{"op": "replace", "path": "/metadata/labels", "value": {"a": "1"}}],
        {"metadata": {"labels": {"a": "1"}}},
        id="v4-replace-missing-member-adds",
    ),
    pytest.param(
        {"a": 1},
        [{"op": "copy", "from": "/missing", "path": "/b"}],
        {"a": 1, "b": None},
        id="v4-copy-missing-member-copies-null",
    ),
    pytest.param(
        {"a": {"b": [1]}},
        [
            {"op": "copy", "from": "/a", "path": "/c"},
            {"op": "add", "path": "/c/b/-", "value": 2},
        ],
        {"a": {"b": [1]}, "c": {"b": [1, 2]}},
        id="copy-is-deep",
    ),
    pytest.param(
        {"a": 1},
        [{"op": "add", "path": "/a", "value": 2}],
        {"a": 2},
        id="add-replaces-existing-member",
    ),
    pytest.param(
        {"a": 1},
        [
            {"op": "add", "path": "/obj", "value": {}},
            {"op": "add", "path": "/obj/k", "value": "v"},
            {"op": "move", "from": "/obj/k", "path": "/k"},
            {"op": "remove", "path": "/obj"},
        ],
        {"a": 1, "k": "v"},
        id="operations-apply-in-order",
    ),
    pytest.param(
        {"a": 1},
        [{"op": "move", "from": "/a", "path": "/a"}],
        {"a": 1},
        id="move-onto-itself",
    ),
    pytest.param(
        {"a": 1},
        [
            {"op": "test", "path": "", "value": {"a": 1.0}},
            {"op": "replace", "path": "", "value": {"b": 2}},
        ],
        {"b": 2},
        id="root-test-and-replace",
    ),
    pytest.param(
        [1, 2],
        [{"op": "remove", "path": "/0"}],
        [2],
        id="array-document",
    ),
    pytest.param(
        {"metadata": {"resourceVersion": "7", "labels": {"a": "1"}}},
        [
            {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            {"op": "replace", "path": "/metadata/labels/a", "value": "2"},
        ],
        {"metadata": {"resourceVersion": "7", "labels": {"a": "2"}}},
        id="kubernetes-optimistic-lock",
    ),
]


@pytest.mark.parametrize(("target", "operations", "expected"), JSON_PATCH_BEHAVIOUR)
def test_json_patch_behaviour(target: Any, operations: Any, expected: Any) -> None:
    """JSON patch follows RFC 6902/6901 and evanphx/json-patch v4 where they differ."""
    assert json_patch(target, operations) == expected


def test_json_patch_test_distinguishes_booleans_from_numbers() -> None:
    """A test of true against 1 fails even though Python considers them equal."""
    with pytest.raises(PatchApplyError, match="testing value /a failed"):
        json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": True}])


JSON_PATCH_APPLY_ERRORS = [
    pytest.param(
        {"metadata": {"resourceVersion": "5"}},
        [{"op": "test", "path": "/metadata/resourceVersion", "value": "4"}],
        "testing value /metadata/resourceVersion failed: test failed",
        id="test-failed",
    ),
    pytest.param(
        {"a": 1},
        [{"op": "test", "path": "/missing", "value": 1}],
        "testing value /missing failed: test failed",
        id="test-missing-member",
    ),
    pytest.param(
        {"a": None},
        [{"op": "test", "path": "/a", "value": 0}],
        "testing value /a failed: test failed",
        id="test-null-is-not-zero",
    ),
    pytest.param(
        {"a": 1},
        [{"op": "test", "path": "/x/y", "value": 1}],
        "test operation does not apply: is missing path: /x/y: missing value",
        id="test-missing-parent",
    ),
    pytest.param(
        {"l": [1]},
        [{"op": "test", "path": "/l/9", "value": 1}],
        "error in test for path: '/l/9': Unable to access invalid index: 9: "
        "invalid index referenced",
        id="test-index-out-of-range",
    ),
    pytest.param(
        {"metadata": {}},
        [{"op": "add", "path": "/metadata/labels/app", "value": "x"}],
        'add operation does not apply: doc is missing path: "/metadata/labels/app": missing value',
        id="add-missing-parent",
    ),
    pytest.param(
        {"a": "scalar"},
        [{"op": "add", "path": "/a/b", "value": 1}],
        'add operation does not apply: doc is missing path: "/a/b": missing value',
        id="add-through-scalar",
    ),
    pytest.param(
        {"a": 1},
        [{"op": "add", "path": "", "value": {}}],
        'add operation does not apply: doc is missing path: "": missing value',
        id="v4-add-at-root",
    ),
    pytest.param(
        {"l": [1]},
        [{"op": "add", "path": "/l/3", "value": 1}],
        "error in add for path: '/l/3': Unable to access invalid index: 3: "
        "invalid index referenced",
        id="add-index-out-of-range",
    ),
    pytest.param(
        {"l": [1]},
        [{"op": "add", "path": "/l/x", "value": 1}],
        "error in add for path: '/l/x': value was not a proper array index: 'x': "
        'strconv.Atoi: parsing "x": invalid syntax',
        id="add-non-integer-index",
    ),
    pytest.param(
        {"metadata": {"name": "n"}},
        [{"op": "remove", "path": "/metadata/labels"}],
        "error in remove for path: '/metadata/labels': Unable to remove nonexistent key: "
        "labels: missing value",
        id="remove-missing-member",
    ),
    pytest.param(
        {"a": 1},
        [{"op": "remove", "path": "/x/y"}],
        'remove operation does not apply: doc is missing path: "/x/y": missing value',
        id="remove-missing-parent",
    ),
    pytest.param(
        {"l": [1]},
        [{"op": "remove", "path": "/l/1"}],
        "error in remove for path: '/l/1': Unable to access invalid index: 1: "
        "invalid index referenced",
        id="remove-index-out-of-range",
    ),
    pytest.param(
        {"l": [1]},
        [{"op": "replace", "path": "/l/5", "value": 1}],
        "replace operation does not apply: doc is missing key: /l/5: missing value",
        id="replace-index-out-of-range",
    ),
    pytest.param(
        {"a": 1},
        [{"op": "replace", "path": "/x/y", "value": 1}],
        "replace operation does not apply: doc is missing path: /x/y: missing value",
        id="replace-missing-parent",
    ),
    pytest.param(
        {"a": 1},
        [{"op": "replace", "path": "", "value": 3}],
        "replace operation value must be object or array",
        id="replace-root-with-scalar",
    ),
    pytest.param(
        {"a": 1},
        [{"op": "move", "from": "/x/y", "path": "/b"}],
        "move operation does not apply: doc is missing from path: /x/y: missing value",
        id="move-missing-from-parent",
    ),
    pytest.param(
        {"a": 1},
        [{"op": "move", "from": "/b", "path": "/c"}],
        "error in move for path: 'b': Unable to remove nonexistent key: b: missing value",
        id="move-missing-from-member",
    ),
    pytest.param(
        {"a": {"b": 1}},
        [{"op": "move", "from": "/a", "path": "/a/c"}],
        "move operation does not apply: doc is missing destination path: /a/c: missing value",
        id="move-into-own-child",
    ),
    pytest.param(
        {"a": 1},
        [{"op": "copy", "from": "/x/y", "path": "/b"}],
        "copy operation does not apply: doc is missing from path: /x/y: missing value",
        id="copy-missing-from-parent",
    ),
    pytest.param(
        {"a": 1},
        [{"op": "copy", "from": "/a", "path": "/x/y"}],
        "copy operation does not apply: doc is missing destination path: /x/y: missing value",
        id="copy-missing-destination",
    ),
    pytest.param(
        "scalar",
        [],
        "json: cannot unmarshal string into Go value of type jsonpatch.partialDoc",
        id="scalar-document",
    ),
]


@pytest.mark.parametrize(("target", "operations", "message"), JSON_PATCH_APPLY_ERRORS)
def test_json_patch_apply_errors(target: Any, operations: Any, message: str) -> None:
    """Operations that cannot apply raise PatchApplyError with evanphx/json-patch v4's text."""
    with pytest.raises(PatchApplyError) as excinfo:
        json_patch(target, operations)
    assert excinfo.value.message == message
    assert str(excinfo.value) == message


JSON_PATCH_MALFORMED = [
    pytest.param(
        {"op": "add"},
        "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
        id="document-is-object",
    ),
    pytest.param(
        None, "json: cannot unmarshal null into Go value of type jsonpatch.Patch", id="null"
    ),
    pytest.param(
        ["add"],
        "json: cannot unmarshal string into Go value of type jsonpatch.Operation",
        id="operation-is-string",
    ),
    pytest.param([None], "Unexpected kind: unknown", id="operation-is-null"),
    pytest.param([{"path": "/a"}], "Unexpected kind: unknown", id="missing-op"),
    pytest.param([{"op": 1, "path": "/a"}], "Unexpected kind: unknown", id="op-not-string"),
    pytest.param([{"op": "upsert", "path": "/a"}], "Unexpected kind: upsert", id="unknown-op"),
    pytest.param(
        [{"op": "add", "value": 1}],
        "add operation failed to decode path: missing value",
        id="add-missing-path",
    ),
    pytest.param(
        [{"op": "replace", "value": 1}],
        "replace operation failed to decode path: operation missing path field: missing value",
        id="replace-missing-path",
    ),
    pytest.param(
        [{"op": "test", "path": 5, "value": 1}],
        "test operation failed to decode path: json: cannot unmarshal number into Go value "
        "of type string",
        id="path-not-string",
    ),
    pytest.param(
        [{"op": "move", "path": "/a"}],
        "move operation failed to decode from: operation, missing from field: missing value",
        id="move-missing-from",
    ),
    pytest.param(
        [{"op": "copy", "from": "/a"}],
        "copy operation failed to decode path: missing value",
        id="copy-missing-path",
    ),
    pytest.param(
        [{"op": "add", "path": "a/b", "value": 1}],
        'add operation has an invalid JSON pointer in "path": "a/b" '
        '(must be empty or start with "/")',
        id="pointer-without-slash",
    ),
    pytest.param(
        [{"op": "add", "path": "/a"}],
        "add operation is missing its value field",
        id="add-missing-value",
    ),
    pytest.param(
        [{"op": "test", "path": "/a"}],
        "test operation is missing its value field",
        id="test-missing-value",
    ),
    pytest.param(
        [{"op": "remove", "path": "/nope"}, {"op": "frob", "path": "/a"}],
        "Unexpected kind: frob",
        id="whole-document-checked-first",
    ),
]


@pytest.mark.parametrize(("operations", "message"), JSON_PATCH_MALFORMED)
def test_json_patch_malformed(operations: Any, message: str) -> None:
    """A document that is not a list of operations with valid op/path is a 400 error."""
    with pytest.raises(MalformedPatchError) as excinfo:
        json_patch({"a": 1}, operations)
    assert excinfo.value.message == message


def test_json_patch_is_atomic() -> None:
    """A failure in a later operation leaves the target exactly as it was."""
    target = {"metadata": {"labels": {"a": "1"}}, "l": [1, 2]}
    before = copy.deepcopy(target)
    operations = [
        {"op": "add", "path": "/metadata/labels/b", "value": "2"},
        {"op": "remove", "path": "/l/0"},
        {"op": "test", "path": "/metadata/labels/a", "value": "wrong"},
    ]
    with pytest.raises(PatchApplyError):
        json_patch(target, operations)
    assert target == before


def test_error_hierarchy() -> None:
    """Both error kinds are PatchErrors that carry their message."""
    assert issubclass(MalformedPatchError, PatchError)
    assert issubclass(PatchApplyError, PatchError)
    assert PatchApplyError("boom").message == "boom"


# --------------------------------------------------------------- strategic merge patch

SCHEMA: PatchSchema = {
    "metadata.finalizers": MergeList(),
    "status.conditions": MergeList(keys=("type",)),
    "status.addresses": MergeList(keys=("type",)),
    "spec.ports": MergeList(keys=("port", "protocol"), defaults={"protocol": "TCP"}),
    "spec.containers": MergeList(keys=("name",)),
    "spec.containers[].ports": MergeList(
        keys=("containerPort", "protocol"), defaults={"protocol": "TCP"}
    ),
    "spec.containers[].args": MergeList(),
    "spec.template.spec.containers": MergeList(keys=("name",)),
    "spec.template.spec.containers[].env": MergeList(keys=("name",)),
}

SMP_MAPS = [
    pytest.param(
        {"metadata": {"name": "n", "labels": {"a": "1"}}},
        {"metadata": {"labels": {"b": "2"}}},
        {"metadata": {"name": "n", "labels": {"a": "1", "b": "2"}}},
        id="maps-merge-recursively",
    ),
    pytest.param(
        {"metadata": {"labels": {"a": "1", "b": "2"}}},
        {"metadata": {"labels": {"a": None}}},
        {"metadata": {"labels": {"b": "2"}}},
        id="null-deletes-key",
    ),
    pytest.param(
        {"metadata": {"name": "n"}},
        {"metadata": {"labels": None}},
        {"metadata": {"name": "n"}},
        id="null-for-absent-key-is-noop",
    ),
    pytest.param(
        {"spec": {"replicas": 1, "paused": False}},
        {"spec": {"replicas": 3}},
        {"spec": {"replicas": 3, "paused": False}},
        id="scalar-replaced",
    ),
    pytest.param(
        {"spec": {"selector": "app=x"}},
        {"spec": {"selector": {"app": "x", "tier": None}}},
        {"spec": {"selector": {"app": "x"}}},
        id="type-change-replaces-and-drops-nulls",
    ),
    pytest.param(
        {"metadata": {}},
        {"metadata": {"annotations": {"a": "1", "b": None, "c": {"d": None}}}},
        {"metadata": {"annotations": {"a": "1", "c": {}}}},
        id="new-map-drops-nulls",
    ),
    pytest.param(
        {"spec": {"$ref": "old"}},
        {"spec": {"$ref": "new", "$schema": "s"}},
        {"spec": {"$ref": "new", "$schema": "s"}},
        id="dollar-fields-that-are-not-directives",
    ),
]

SMP_LISTS = [
    pytest.param(
        {"spec": {"tolerations": [{"key": "a"}, {"key": "b"}]}},
        {"spec": {"tolerations": [{"key": "c"}]}},
        {"spec": {"tolerations": [{"key": "c"}]}},
        id="list-not-in-schema-replaced",
    ),
    pytest.param(
        {"spec": {"tolerations": [{"key": "a"}]}},
        {"spec": {"tolerations": [{"key": "b", "value": None}, {"$patch": "delete", "key": "a"}]}},
        {"spec": {"tolerations": [{"key": "b"}]}},
        id="replaced-list-elements-cleaned",
    ),
    pytest.param(
        {"metadata": {"finalizers": ["a", "b"]}},
        {"metadata": {"finalizers": ["c", "a", "d"]}},
        {"metadata": {"finalizers": ["a", "b", "c", "d"]}},
        id="finalizers-union-keeps-order",
    ),
    pytest.param(
        {"metadata": {"finalizers": ["a"]}},
        {"metadata": {"finalizers": ["a", "a", "b", "b"]}},
        {"metadata": {"finalizers": ["a", "b"]}},
        id="finalizers-union-is-a-set",
    ),
    pytest.param(
        {"metadata": {"finalizers": ["a", "b"]}},
        {"metadata": {"finalizers": []}},
        {"metadata": {"finalizers": ["a", "b"]}},
        id="empty-merge-list-is-noop",
    ),
    pytest.param(
        {"metadata": {"finalizers": ["a", "b", "c"]}},
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["b", "zz"]}},
        {"metadata": {"finalizers": ["a", "c"]}},
        id="finalizers-delete-from-primitive-list",
    ),
    pytest.param(
        {"metadata": {"finalizers": ["a", "b"]}},
        {"metadata": {"finalizers": ["c"], "$deleteFromPrimitiveList/finalizers": ["a"]}},
        {"metadata": {"finalizers": ["b", "c"]}},
        id="finalizers-add-and-delete-together",
    ),
    pytest.param(
        {"metadata": {"name": "n"}},
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}},
        {"metadata": {"name": "n"}},
        id="delete-from-absent-list-is-noop",
    ),
    pytest.param(
        {"metadata": {"finalizers": ["a", "b"]}},
        {"metadata": {"finalizers": None}},
        {"metadata": {}},
        id="null-deletes-merge-list",
    ),
    pytest.param(
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "Booting"},
                    {"type": "MemoryPressure", "status": "False"},
                ]
            }
        },
        {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": None}]}},
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "MemoryPressure", "status": "False"},
                ]
            }
        },
        id="conditions-merged-by-type",
    ),
    pytest.param(
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        {"status": {"conditions": [{"type": "NetworkUnavailable", "status": "False"}]}},
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "NetworkUnavailable", "status": "False"},
                ]
            }
        },
        id="conditions-new-type-appended",
    ),
    pytest.param(
        {
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.1"},
                    {"type": "Hostname", "address": "node-1"},
                ]
            }
        },
        {
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.2"},
                    {"type": "ExternalIP", "address": "203.0.113.7"},
                ]
            }
        },
        {
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.2"},
                    {"type": "Hostname", "address": "node-1"},
                    {"type": "ExternalIP", "address": "203.0.113.7"},
                ]
            }
        },
        id="node-addresses-merged-by-type",
    ),
    pytest.param(
        {"status": {"addresses": [{"type": "Hostname", "address": "node-1"}]}},
        {
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.1"},
                    {"type": "InternalIP", "address": "10.0.0.2"},
                ]
            }
        },
        {
            "status": {
                "addresses": [
                    {"type": "Hostname", "address": "node-1"},
                    {"type": "InternalIP", "address": "10.0.0.2"},
                ]
            }
        },
        id="node-addresses-same-type-collapse-like-kubernetes",
    ),
    pytest.param(
        {"spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080, "name": "web"}]}},
        {"spec": {"ports": [{"port": 80, "targetPort": 9090}]}},
        {"spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 9090, "name": "web"}]}},
        id="service-port-default-protocol-matches",
    ),
    pytest.param(
        {"spec": {"ports": [{"port": 80, "targetPort": 8080}]}},
        {"spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 9090}]}},
        {"spec": {"ports": [{"port": 80, "targetPort": 9090, "protocol": "TCP"}]}},
        id="service-port-default-applies-to-target-too",
    ),
    pytest.param(
        {"spec": {"ports": [{"port": 80, "protocol": "TCP"}]}},
        {"spec": {"ports": [{"port": 80, "protocol": "UDP"}]}},
        {"spec": {"ports": [{"port": 80, "protocol": "TCP"}, {"port": 80, "protocol": "UDP"}]}},
        id="service-port-udp-appended",
    ),
    pytest.param(
        {
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "app:1",
                        "args": ["--a"],
                        "ports": [{"containerPort": 80, "name": "http"}],
                    },
                    {"name": "sidecar", "image": "sidecar:1"},
                ]
            }
        },
        {
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "app:2",
                        "args": ["--b"],
                        "ports": [
                            {"containerPort": 80, "protocol": "TCP", "name": "web"},
                            {"containerPort": 443},
                        ],
                    }
                ]
            }
        },
        {
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "app:2",
                        "args": ["--a", "--b"],
                        "ports": [
                            {"containerPort": 80, "name": "web", "protocol": "TCP"},
                            {"containerPort": 443},
                        ],
                    },
                    {"name": "sidecar", "image": "sidecar:1"},
                ]
            }
        },
        id="nested-merge-lists-inside-elements",
    ),
]

SMP_DIRECTIVES = [
    pytest.param(
        {"status": {"conditions": [{"type": "A"}, {"type": "B"}, {"type": "A", "x": 1}]}},
        {"status": {"conditions": [{"$patch": "delete", "type": "A"}]}},
        {"status": {"conditions": [{"type": "B"}]}},
        id="list-delete-directive-removes-all-matches",
    ),
    pytest.param(
        {"spec": {"ports": [{"port": 80, "protocol": "TCP"}, {"port": 80, "protocol": "UDP"}]}},
        {"spec": {"ports": [{"$patch": "delete", "port": 80}]}},
        {"spec": {"ports": [{"port": 80, "protocol": "UDP"}]}},
        id="list-delete-directive-uses-defaults",
    ),
    pytest.param(
        {"status": {"conditions": [{"type": "A"}, {"type": "B"}]}},
        {"status": {"conditions": [{"type": "C"}, {"$patch": "replace"}]}},
        {"status": {"conditions": [{"type": "C"}]}},
        id="list-replace-directive",
    ),
    pytest.param(
        {"metadata": {"finalizers": ["a", "b"]}},
        {"metadata": {"finalizers": [{"$patch": "replace"}, "c"]}},
        {"metadata": {"finalizers": ["c"]}},
        id="primitive-list-replace-directive",
    ),
    pytest.param(
        {"metadata": {"labels": {"a": "1", "b": "2"}}},
        {"metadata": {"labels": {"$patch": "replace", "c": "3"}}},
        {"metadata": {"labels": {"c": "3"}}},
        id="map-replace-directive",
    ),
    pytest.param(
        {"metadata": {"name": "n", "labels": {"a": "1"}}},
        {"metadata": {"labels": {"$patch": "delete"}}},
        {"metadata": {"name": "n"}},
        id="map-delete-directive",
    ),
    pytest.param(
        {"metadata": {"name": "n"}},
        {"$patch": "delete"},
        {},
        id="root-delete-directive",
    ),
    pytest.param(
        {"metadata": {"name": "n"}, "spec": {"a": 1}},
        {"$patch": "replace", "spec": {"b": 2}},
        {"spec": {"b": 2}},
        id="root-replace-directive",
    ),
    pytest.param(
        {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}},
        {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}},
        {"spec": {"strategy": {"type": "Recreate"}}},
        id="retain-keys",
    ),
    pytest.param(
        {"spec": {"volume": {"emptyDir": {}, "name": "v", "other": 1}}},
        {"spec": {"volume": {"$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}}},
        {"spec": {"volume": {"name": "v", "hostPath": {"path": "/x"}}}},
        id="retain-keys-adds-patched-keys",
    ),
    pytest.param(
        {"spec": {"volume": {"emptyDir": {}, "name": "v"}}},
        {"spec": {"volume": {"$retainKeys": ["name"], "emptyDir": None}}},
        {"spec": {"volume": {"name": "v"}}},
        id="retain-keys-allows-nulls",
    ),
    pytest.param(
        {"metadata": {}},
        {
            "metadata": {
                "labels": {"$retainKeys": ["a"], "a": "1"},
                "finalizers": ["x", {"$patch": "replace"}],
                "$setElementOrder/finalizers": ["x"],
                "annotations": {"$patch": "delete"},
            },
            "status": {"conditions": [{"type": "A"}, {"$patch": "delete", "type": "B"}]},
        },
        {
            "metadata": {"labels": {"a": "1"}, "finalizers": ["x"]},
            "status": {"conditions": [{"type": "A"}]},
        },
        id="directives-in-new-fields-are-applied-not-copied",
    ),
]

KUBECTL_APPLY = [
    pytest.param(
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]}
                        ]
                    }
                }
            }
        },
        {
            "spec": {
                "template": {
                    "spec": {
                        "$setElementOrder/containers": [{"name": "app"}, {"name": "proxy"}],
                        "containers": [
                            {
                                "$setElementOrder/env": [{"name": "B"}, {"name": "A"}],
                                "env": [{"name": "B", "value": "2"}],
                                "name": "app",
                            },
                            {"name": "proxy", "image": "proxy:1"},
                        ],
                    }
                }
            }
        },
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "app",
                                "image": "app:1",
                                "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}],
                            },
                            {"name": "proxy", "image": "proxy:1"},
                        ]
                    }
                }
            }
        },
        id="add-container-and-env",
    ),
    pytest.param(
        {"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}},
        {"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "a"}]}},
        {"spec": {"containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}]}},
        id="reorder-only-unmentioned-kept-after",
    ),
    pytest.param(
        {"spec": {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 80, "protocol": "TCP"}]}},
        {"spec": {"$setElementOrder/ports": [{"port": 80}, {"port": 443}]}},
        {"spec": {"ports": [{"port": 80, "protocol": "TCP"}, {"port": 443, "protocol": "TCP"}]}},
        id="reorder-by-keys-with-defaults",
    ),
    pytest.param(
        {"metadata": {"finalizers": ["a", "c", "b"]}},
        {
            "metadata": {
                "$deleteFromPrimitiveList/finalizers": ["c"],
                "$setElementOrder/finalizers": ["b", "d", "a"],
                "finalizers": ["d"],
            }
        },
        {"metadata": {"finalizers": ["b", "d", "a"]}},
        id="primitive-list-order-add-and-delete",
    ),
    pytest.param(
        {"metadata": {"name": "n"}},
        {"metadata": {"$setElementOrder/finalizers": ["a"]}},
        {"metadata": {"name": "n"}},
        id="order-for-absent-list-ignored",
    ),
]


@pytest.mark.parametrize(
    ("target", "patch", "expected"), SMP_MAPS + SMP_LISTS + SMP_DIRECTIVES + KUBECTL_APPLY
)
def test_strategic_merge_patch(target: Any, patch: Any, expected: Any) -> None:
    """Strategic merge patch follows Kubernetes' rules for maps, lists and directives."""
    result = strategic_merge_patch(target, patch, SCHEMA)
    assert result == expected
    assert list(_directive_keys(result)) == []


def _directive_keys(value: Any) -> Iterator[str]:
    """Yield every patch-directive key anywhere in a JSON value."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key.startswith(
                ("$patch", "$retainKeys", "$setElementOrder", "$deleteFromPrimitiveList")
            ):
                yield key
            yield from _directive_keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from _directive_keys(item)


def test_strategic_merge_patch_element_order() -> None:
    """Merged elements keep the target's order and unmatched patch elements are appended."""
    target = {"status": {"conditions": [{"type": "A"}, {"type": "B"}, {"type": "C"}]}}
    patch = {"status": {"conditions": [{"type": "D"}, {"type": "C", "s": 1}, {"type": "A"}]}}
    result = strategic_merge_patch(target, patch, SCHEMA)
    assert [c["type"] for c in result["status"]["conditions"]] == ["A", "B", "C", "D"]


SMP_MALFORMED = [
    pytest.param(
        [{"op": "add"}],
        "json: cannot unmarshal array into Go value of type map[string]interface {}",
        id="patch-is-array",
    ),
    pytest.param(
        None,
        "json: cannot unmarshal null into Go value of type map[string]interface {}",
        id="patch-is-null",
    ),
    pytest.param(
        {"metadata": {"labels": {"$patch": "remove", "a": "1"}}},
        "unknown patch type: remove in map: map[$patch:remove a:1]",
        id="unknown-patch-in-map",
    ),
    pytest.param(
        {"metadata": {"labels": {"$patch": 1}}},
        "unknown patch type: 1 in map: map[$patch:1]",
        id="non-string-patch-in-map",
    ),
    pytest.param(
        {"status": {"conditions": [{"$patch": "frob", "type": "A"}]}},
        "unknown patch type: frob in map: map[$patch:frob type:A]",
        id="unknown-patch-in-list",
    ),
    pytest.param(
        {"status": {"conditions": [{"$patch": "merge"}]}},
        "merging lists cannot yet be specified in the patch",
        id="merge-patch-in-list",
    ),
    pytest.param(
        {"spec": {"strategy": {"$retainKeys": "type"}}},
        "invalid patch format of retainKeys",
        id="retain-keys-not-list",
    ),
    pytest.param(
        {"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}},
        "invalid patch format of retainKeys",
        id="patched-key-missing-from-retain-keys",
    ),
    pytest.param(
        {"metadata": {"$setElementOrder/finalizers": "a"}},
        "invalid patch format of setElementOrder list",
        id="set-element-order-not-list",
    ),
    pytest.param(
        {"metadata": {"$setElementOrderX/finalizers": ["a"]}},
        "invalid patch format of setElementOrder list",
        id="set-element-order-bad-prefix",
    ),
    pytest.param(
        {"spec": {"containers": [{"name": "a"}], "$setElementOrder/containers": ["a"]}},
        "invalid patch format of setElementOrder list",
        id="set-element-order-entry-not-object",
    ),
    pytest.param(
        {"metadata": {"$deleteFromPrimitiveList": ["a"]}},
        "invalid patch format of primitive list",
        id="delete-from-primitive-list-without-field",
    ),
    pytest.param(
        {"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}},
        "invalid patch format of primitive list",
        id="delete-from-primitive-list-not-list",
    ),
    pytest.param(
        {"status": {"conditions": [{"status": "True"}]}},
        "map: map[status:True] does not contain declared merge key: type",
        id="merge-key-missing",
    ),
    pytest.param(
        {"status": {"conditions": [{"$patch": "delete"}]}},
        "map: map[$patch:delete] does not contain declared merge key: type",
        id="delete-directive-without-key",
    ),
    pytest.param(
        {"status": {"conditions": ["Ready"]}},
        "expected a map[string]interface {}, but received a string",
        id="keyed-list-element-not-object",
    ),
    pytest.param(
        {"metadata": {"finalizers": [{"$patch": "delete"}]}},
        "$patch: delete needs a list merged by key, but metadata.finalizers is a list of "
        "primitives; use $deleteFromPrimitiveList",
        id="delete-directive-in-primitive-list",
    ),
]


@pytest.mark.parametrize(("patch", "message"), SMP_MALFORMED)
def test_strategic_merge_patch_malformed(patch: Any, message: str) -> None:
    """Bad directives and non-object patches raise MalformedPatchError."""
    target = {
        "metadata": {"finalizers": ["a"], "labels": {"a": "1"}},
        "spec": {"strategy": {"type": "Recreate"}, "containers": [{"name": "a"}]},
        "status": {"conditions": [{"type": "A"}]},
    }
    with pytest.raises(MalformedPatchError) as excinfo:
        strategic_merge_patch(target, patch, SCHEMA)
    assert excinfo.value.message == message


# ------------------------------------------------------------------------ no mutation

NON_MUTATION = [
    pytest.param(
        lambda t, p: json_merge_patch(t, p),
        {"metadata": {"labels": {"a": "1"}, "finalizers": ["a"]}},
        {"metadata": {"labels": {"a": None, "b": {"c": "d"}}, "new": {"x": [1]}}},
        id="merge-patch",
    ),
    pytest.param(
        lambda t, p: json_patch(t, p),
        {"metadata": {"labels": {"a": "1"}, "finalizers": ["a"]}},
        [
            {"op": "add", "path": "/metadata/new", "value": {"x": [1]}},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "b"},
            {"op": "remove", "path": "/metadata/labels/a"},
        ],
        id="json-patch",
    ),
    pytest.param(
        lambda t, p: strategic_merge_patch(t, p, SCHEMA),
        {
            "metadata": {"labels": {"a": "1"}, "finalizers": ["a"]},
            "status": {"conditions": [{"type": "A", "status": "False"}]},
        },
        {
            "metadata": {
                "labels": {"a": None},
                "finalizers": ["b"],
                "new": {"x": [1]},
                "$setElementOrder/finalizers": ["b", "a"],
            },
            "status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B"}]},
        },
        id="strategic-merge-patch",
    ),
]


@pytest.mark.parametrize(("apply", "target", "patch"), NON_MUTATION)
def test_inputs_are_never_mutated_or_aliased(apply: Any, target: Any, patch: Any) -> None:
    """Patching leaves both inputs untouched and later changes to the result do not leak."""
    target_before, patch_before = copy.deepcopy(target), copy.deepcopy(patch)
    result = apply(target, patch)
    assert (target, patch) == (target_before, patch_before)
    result["metadata"]["new"]["x"].append(2)
    result["metadata"].setdefault("labels", {})["z"] = "z"
    result["metadata"]["finalizers"].append("z")
    assert (target, patch) == (target_before, patch_before)


# ------------------------------------------------------------------------ properties

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5)
)
_KEYS = st.text(max_size=4).filter(lambda key: not key.startswith("$"))

_JSON = st.recursive(
    _SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_KEYS, children, max_size=4),
    max_leaves=20,
)
# Documents whose object members are never null (a null member in a patch deletes).
_JSON_NO_NULL_MEMBERS = st.recursive(
    _SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(_KEYS, children.filter(lambda v: v is not None), max_size=4)
    ),
    max_leaves=20,
)
# Objects nested in objects, with scalar (possibly null) leaves and no lists.
_MAP_ONLY = st.recursive(
    st.dictionaries(_KEYS, _SCALARS, max_size=4),
    lambda children: st.dictionaries(_KEYS, children | _SCALARS, max_size=4),
    max_leaves=20,
)


@given(_JSON_NO_NULL_MEMBERS)
def test_merge_patch_with_itself_is_identity(document: Any) -> None:
    """Merge-patching a document with itself gives the document back."""
    assert json_merge_patch(document, document) == document


@given(_JSON, _JSON)
def test_merge_patch_is_idempotent(target: Any, patch: Any) -> None:
    """Applying the same merge patch twice changes nothing the second time."""
    once = json_merge_patch(target, patch)
    assert json_merge_patch(once, patch) == once


@given(st.dictionaries(_KEYS, _JSON, max_size=5) | st.lists(_JSON, max_size=5))
def test_empty_json_patch_is_identity(document: Any) -> None:
    """An empty JSON patch returns an equal document."""
    assert json_patch(document, []) == document


@given(st.dictionaries(_KEYS, _JSON, max_size=5), _JSON)
def test_json_patch_add_then_remove_round_trips(document: Any, value: Any) -> None:
    """Adding a new member and removing it again restores the document."""
    key = "~/new"
    assert key not in document
    operations = [
        {"op": "add", "path": "/~0~1new", "value": value},
        {"op": "test", "path": "/~0~1new", "value": value},
        {"op": "remove", "path": "/~0~1new"},
    ]
    assert json_patch(document, operations) == document


@given(_MAP_ONLY, _MAP_ONLY)
def test_strategic_with_empty_schema_matches_merge_patch_on_maps(target: Any, patch: Any) -> None:
    """On list-free documents a strategic merge patch is exactly an RFC 7386 merge patch."""
    assert strategic_merge_patch(target, patch, {}) == json_merge_patch(target, patch)


@given(_MAP_ONLY, _MAP_ONLY)
def test_strategic_merge_patch_does_not_mutate(target: Any, patch: Any) -> None:
    """Strategic merge patch never changes its inputs."""
    target_before, patch_before = copy.deepcopy(target), copy.deepcopy(patch)
    strategic_merge_patch(target, patch, SCHEMA)
    assert (target, patch) == (target_before, patch_before)
