"""Label and field selectors: grammar, matching and the apiserver's error texts.

Where a test asserts an exact message, the text was checked against upstream:

* label selector grammar and parse errors: ``k8s.io/apimachinery/pkg/labels/selector.go``
  (``Parser.parse``, ``parseRequirement``, ``parseKeyAndInferOperator``,
  ``parseOperator``, ``parseValues``, ``parseIdentifiersList``, ``parseExactValue``,
  ``NewRequirement``, ``validateLabelKey``, ``validateLabelValue``); the ``<nil>:``
  field of key errors comes from ``field.Path.String`` on a nil path
  (``pkg/util/validation/field/path.go``) and matches upstream's own tests
  (``LabelSelectorParsingErr`` in apiserver's request-info tests);
* key / value texts: ``pkg/api/validate/content/kube.go`` (``IsLabelKey``,
  ``IsLabelValue``), ``content/errors.go`` (``MaxLenError`` in bytes, ``RegexError``);
* ``label_selector_from_object``: ``metav1.LabelSelectorAsSelector``
  (``pkg/apis/meta/v1/helpers.go``);
* field selectors: ``k8s.io/apimachinery/pkg/fields/selector.go`` (``parseSelector``,
  ``splitTerms``, ``splitTerm``, ``UnescapeValue``, ``InvalidEscapeSequence``,
  ``UnescapedRune`` -- whose ``%v`` of a rune prints its number).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_ccm_testbed.apiserver.selector import (
    FieldRequirement,
    FieldSelector,
    LabelSelector,
    SelectorError,
    label_selector_from_object,
    parse_field_selector,
    parse_label_selector,
)

KEY_NAME_REGEX = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_REGEX = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
SUBDOMAIN_REGEX = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
REQ = "unable to parse requirement: "
GT_LT_INTEGER = "for 'Gt', 'Lt' operators, the value must be an integer"


# ----- label selectors: parsing to the canonical form -------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        ("   \t ", ""),
        ("a=b", "a=b"),
        ("a==b", "a==b"),
        ("a!=b", "a!=b"),
        ("a in (c,b,b)", "a in (b,c)"),
        ("a notin (b)", "a notin (b)"),
        ("a", "a"),
        ("!a", "!a"),
        ("a>1", "a>1"),
        ("a<10", "a<10"),
        # blanks (space, tab, CR, LF) may separate any two tokens
        ("  a  =  b ,\tc\n", "a=b,c"),
        ("a\r\n!=\tb", "a!=b"),
        ("a in(b , c)", "a in (b,c)"),
        # requirements are sorted by key; equal keys keep their order
        ("z,y=1,!x", "!x,y=1,z"),
        ("a=2,a=1", "a=2,a=1"),
        # upstream's documented example: empty values in a set
        ("x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()"),
        ("a in (,b)", "a in (,b)"),
        ("a in (b,)", "a in (,b)"),
        ("a in (,)", "a in ()"),
        ("a in ()", "a in ()"),
        # an exact match with nothing after the operator matches the empty value
        ("a=", "a="),
        ("a=,b", "a=,b"),
        ("a!=,b", "a!=,b"),
        # "in" / "notin" are plain words where a key or a value is expected
        ("in=notin", "in=notin"),
        ("a in (in,notin)", "a in (in,notin)"),
        ("!in", "!in"),
        ("example.com/app=web-1.2_3", "example.com/app=web-1.2_3"),
        # like upstream's lexer, a NUL character where a token starts ends the input
        ("\x00a=b", ""),
        ("a\x00", "a"),
    ],
)
def test_parse_label_selector_canonical_form(text: str, canonical: str) -> None:
    """A parsed label selector prints in upstream's canonical (sorted) form."""
    assert str(parse_label_selector(text)) == canonical


def test_empty_label_selector_selects_everything() -> None:
    """The empty label selector is empty and matches any labels."""
    selector = parse_label_selector("")
    assert selector.empty
    assert selector == LabelSelector()
    assert selector.matches({})
    assert selector.matches({"a": "b"})
    assert not parse_label_selector("a").empty


def test_label_selector_is_immutable() -> None:
    """A LabelSelector cannot be changed once parsed."""
    selector = parse_label_selector("a=b")
    with pytest.raises(AttributeError):
        selector.requirements = ()  # type: ignore[misc]


def test_parsed_requirements() -> None:
    """Requirements come out sorted by key, with set values sorted."""
    requirements = parse_label_selector("b in (y,x),a!=1,!c,d").requirements
    assert [(r.key, r.operator, r.values) for r in requirements] == [
        ("a", "!=", ("1",)),
        ("b", "in", ("x", "y")),
        ("c", "!", ()),
        ("d", "exists", ()),
    ]


# ----- label selectors: matching -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("a=b", {"a": "b"}, True),
        ("a=b", {"a": "c"}, False),
        ("a=b", {}, False),
        ("a==b", {"a": "b"}, True),
        ("a==b", {"b": "b"}, False),
        ("a!=b", {"a": "c"}, True),
        ("a!=b", {"a": "b"}, False),
        ("a!=b", {}, True),  # a missing key is "not equal"
        ("a in (b,c)", {"a": "c"}, True),
        ("a in (b,c)", {"a": "d"}, False),
        ("a in (b,c)", {}, False),
        ("a notin (b,c)", {"a": "d"}, True),
        ("a notin (b,c)", {"a": "b"}, False),
        ("a notin (b,c)", {}, True),  # a missing key is "not in"
        ("a", {"a": ""}, True),
        ("a", {"b": "a"}, False),
        ("!a", {}, True),
        ("!a", {"a": ""}, False),
        ("a=", {"a": ""}, True),
        ("a=", {}, False),
        ("a in ()", {"a": ""}, True),
        ("a in (,b)", {"a": "b"}, True),
        ("a>5", {"a": "6"}, True),
        ("a>5", {"a": "5"}, False),
        ("a>5", {"a": "x"}, False),
        ("a>5", {}, False),
        ("a<5", {"a": "-10"}, True),
        ("a<5", {"a": "+4"}, True),
        ("a<5", {"a": "5"}, False),
        ("a<5", {"a": "99999999999999999999"}, False),  # not an int64
        ("a=b,c", {"a": "b", "c": "1"}, True),
        ("a=b,c", {"a": "b"}, False),
        ("a=1,a=2", {"a": "1"}, False),
    ],
)
def test_label_selector_matches(text: str, labels: dict[str, str], expected: bool) -> None:
    """Each operator matches labels as upstream's labels.Selector does."""
    assert parse_label_selector(text).matches(labels) is expected


def test_requires_exact_match() -> None:
    """requires_exact_match names the one value a key must have, or None."""
    assert parse_label_selector("a=b,c").requires_exact_match("a") == "b"
    assert parse_label_selector("a in (b)").requires_exact_match("a") == "b"
    assert parse_label_selector("a in (b,c)").requires_exact_match("a") is None
    assert parse_label_selector("a!=b").requires_exact_match("a") is None
    assert parse_label_selector("c").requires_exact_match("a") is None


# ----- label selectors: errors ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a b", REQ + "found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("a,", "found '', expected: identifier after ','"),
        ("a,,b", "found ',', expected: identifier after ','"),
        (",a", "found ',', expected: !, identifier, or 'end of string'"),
        ("=a", "found '=', expected: !, identifier, or 'end of string'"),
        ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("a=b)", "found ')', expected: ',' or 'end of string'"),
        ("!a=b", "found '=', expected: ',' or 'end of string'"),
        ("!a in (b)", "found 'in', expected: ',' or 'end of string'"),
        ("!", REQ + "found '', expected: identifier"),
        ("!!a", REQ + "found '!', expected: identifier"),
        ("a in b", REQ + "found 'b' expected: '('"),
        ("a in", REQ + "found '' expected: '('"),
        ("a in (b", REQ + "found '', expected: ',' or ')'"),
        ("a in (b c)", REQ + "found 'c', expected: ',' or ')'"),
        ("a in (=)", REQ + "found '=', expected: ',', ')' or identifier"),
        ("a in (b,=)", REQ + "found '=', expected: ',', or identifier"),
        ("a in (b,", REQ + "found '', expected: ',', or identifier"),
        ("a=(b)", REQ + "found '(', expected: identifier"),
        ("a===b", REQ + "found '=', expected: identifier"),
        ("a>=1", REQ + "found '=', expected: identifier"),
        # keys: validated while parsing, reported against a nil field path
        ("a_=b", REQ + '<nil>: Invalid value: "a_": name part ' + KEY_NAME_REGEX),
        ("*bar", REQ + '<nil>: Invalid value: "*bar": name part ' + KEY_NAME_REGEX),
        (
            "a" * 64 + "=b",
            REQ
            + f'<nil>: Invalid value: "{"a" * 64}": name part must be no more than 63 characters',
        ),
        ("/a", REQ + '<nil>: Invalid value: "/a": prefix part must be non-empty'),
        (
            "a/",
            REQ
            + '<nil>: Invalid value: "a/": name part must be non-empty; name part '
            + KEY_NAME_REGEX,
        ),
        (
            "Example.com/a",
            REQ + '<nil>: Invalid value: "Example.com/a": prefix part ' + SUBDOMAIN_REGEX,
        ),
        (
            "a/b/c",
            REQ + '<nil>: Invalid value: "a/b/c": a valid label key ' + KEY_NAME_REGEX + " with "
            "an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
        ),
        # values: validated by NewRequirement, path values[<index>][<key>]
        ("a=b_", REQ + 'values[0][a]: Invalid value: "b_": ' + LABEL_VALUE_REGEX),
        (
            "a=" + "b" * 64,
            REQ + f'values[0][a]: Invalid value: "{"b" * 64}": must be no more than 63 characters',
        ),
        (
            "a in (y_,x_)",
            REQ
            + '[values[0][a]: Invalid value: "x_": '
            + LABEL_VALUE_REGEX
            + ', values[1][a]: Invalid value: "y_": '
            + LABEL_VALUE_REGEX
            + "]",
        ),
        ("a>b", REQ + f'values[0]: Invalid value: "b": {GT_LT_INTEGER}'),
        ("a>", REQ + f'values[0]: Invalid value: "": {GT_LT_INTEGER}'),
        (
            "a<99999999999999999999",
            REQ + f'values[0]: Invalid value: "99999999999999999999": {GT_LT_INTEGER}',
        ),
        (
            "a>b_",
            REQ
            + f'[values[0]: Invalid value: "b_": {GT_LT_INTEGER}, '
            + 'values[0][a]: Invalid value: "b_": '
            + LABEL_VALUE_REGEX
            + "]",
        ),
    ],
)
def test_parse_label_selector_errors(text: str, message: str) -> None:
    """A bad label selector raises SelectorError (a ValueError) with upstream's message."""
    with pytest.raises(SelectorError) as caught:
        parse_label_selector(text)
    assert caught.value.message == message
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


# ----- metav1.LabelSelector objects ----------------------------------------------------------


def test_nil_label_selector_object_selects_nothing() -> None:
    """A nil LabelSelector object selects nothing, as metav1.LabelSelectorAsSelector does."""
    selector = label_selector_from_object(None)
    assert not selector.matches({})
    assert not selector.matches({"a": "b"})
    assert not selector.empty
    assert str(selector) == ""


@pytest.mark.parametrize(
    ("obj", "canonical"),
    [
        ({}, ""),
        ({"matchLabels": {}, "matchExpressions": []}, ""),
        ({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2"),
        (
            {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]}]},
            "env in (dev,prod)",
        ),
        (
            {
                "matchLabels": {"tier": "web"},
                "matchExpressions": [
                    {"key": "zone", "operator": "NotIn", "values": ["a"]},
                    {"key": "gpu", "operator": "Exists"},
                    {"key": "spot", "operator": "DoesNotExist", "values": []},
                ],
            },
            "gpu,!spot,tier=web,zone notin (a)",
        ),
    ],
)
def test_label_selector_from_object(obj: dict[str, Any], canonical: str) -> None:
    """A LabelSelector object converts to the canonical selector of its labels and expressions."""
    selector = label_selector_from_object(obj)
    assert str(selector) == canonical
    assert selector.empty is (canonical == "")


def test_label_selector_from_object_matches() -> None:
    """matchLabels and matchExpressions must all hold for a match."""
    selector = label_selector_from_object(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}],
        }
    )
    assert selector.matches({"app": "web"})
    assert selector.matches({"app": "web", "env": "prod"})
    assert not selector.matches({"app": "web", "env": "dev"})
    assert not selector.matches({"env": "prod"})


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "Foo"}]},
            '"Foo" is not a valid label selector operator',
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "in", "values": ["x"]}]},
            '"in" is not a valid label selector operator',
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
            "values: Invalid value: \"null\": for 'in', 'notin' operators, "
            "values set can't be empty",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            'values: Invalid value: []string{"x"}: '
            "values set must be empty for exists and does not exist",
        ),
        ({"matchLabels": {"a_": "b"}}, 'key: Invalid value: "a_": name part ' + KEY_NAME_REGEX),
        ({"matchLabels": {"a": "b_"}}, 'values[0][a]: Invalid value: "b_": ' + LABEL_VALUE_REGEX),
        (
            {"matchExpressions": [{"key": "a_", "operator": "NotIn"}]},
            '[key: Invalid value: "a_": name part '
            + KEY_NAME_REGEX
            + ", values: Invalid value: \"null\": for 'in', 'notin' operators, values set can't "
            "be empty]",
        ),
    ],
)
def test_label_selector_from_object_errors(obj: dict[str, Any], message: str) -> None:
    """A bad LabelSelector object raises SelectorError with upstream's message."""
    with pytest.raises(SelectorError) as caught:
        label_selector_from_object(obj)
    assert caught.value.message == message


# ----- the round-trip property -----------------------------------------------------------

_KEYS = ["a", "b", "in", "app.kubernetes.io/name", "x.io/notin"]
_VALUES = ["", "v", "w", "in", "notin", "1", "10", "9"]
_INTEGERS = ["0", "1", "9", "10", "42"]


@st.composite
def _requirement_texts(draw: st.DrawFn) -> str:
    key = draw(st.sampled_from(_KEYS))
    blank = draw(st.sampled_from(["", " ", "\t", "  "]))
    kind = draw(st.sampled_from(["=", "==", "!=", "in", "notin", "exists", "!", ">", "<"]))
    if kind == "exists":
        return key
    if kind == "!":
        return f"!{blank}{key}"
    if kind in ("in", "notin"):
        # Non-empty values: upstream's list parser rejects some runs of empty ones ("(,,)").
        values = draw(st.lists(st.sampled_from(_VALUES[1:]), min_size=1, max_size=4))
        return f"{key} {kind}{blank}({blank}{','.join(values)}{blank})"
    if kind in (">", "<"):
        return f"{key}{blank}{kind}{blank}{draw(st.sampled_from(_INTEGERS))}"
    return f"{key}{blank}{kind}{blank}{draw(st.sampled_from(_VALUES))}"


_selector_texts = st.lists(_requirement_texts(), max_size=5).map(",".join)
_label_sets = st.dictionaries(
    st.sampled_from(_KEYS), st.sampled_from(_VALUES + _INTEGERS + ["-3", "x"]), max_size=5
)


@settings(max_examples=300, deadline=None)
@given(text=_selector_texts, label_sets=st.lists(_label_sets, min_size=1, max_size=8))
def test_canonical_form_round_trips(text: str, label_sets: list[dict[str, str]]) -> None:
    """The canonical form parses back to a selector that matches the same labels."""
    selector = parse_label_selector(text)
    again = parse_label_selector(str(selector))
    assert str(again) == str(selector)
    for labels in label_sets:
        assert again.matches(labels) == selector.matches(labels)


# ----- field selectors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "requirements"),
    [
        ("", []),
        ("metadata.name=foo", [("metadata.name", "=", "foo")]),
        ("metadata.name==foo", [("metadata.name", "=", "foo")]),
        ("status.phase!=Running", [("status.phase", "!=", "Running")]),
        # terms come back sorted by their text
        (
            "spec.nodeName=n1,metadata.name=a",
            [("metadata.name", "=", "a"), ("spec.nodeName", "=", "n1")],
        ),
        ("a=1,,b=2,", [("a", "=", "1"), ("b", "=", "2")]),
        ("a=", [("a", "=", "")]),
        ("a!=", [("a", "!=", "")]),
        ("=b", [("", "=", "b")]),
        ("=", []),  # neither a field nor a value: dropped
        ("a=!b", [("a", "=", "!b")]),
        ("a b=c d", [("a b", "=", "c d")]),
        # escapes in the value: \, \= \\ (the field part has no escapes)
        (r"a=x\,y", [("a", "=", "x,y")]),
        (r"a=x\=y", [("a", "=", "x=y")]),
        (r"a=x\\y", [("a", "=", "x\\y")]),
        (r"a=x\\,b=y", [("a", "=", "x\\"), ("b", "=", "y")]),
        (r"a!=\,\=\\", [("a", "!=", ",=\\")]),
    ],
)
def test_parse_field_selector(text: str, requirements: list[tuple[str, str, str]]) -> None:
    """A field selector parses into its requirements (= and == alike, != kept)."""
    selector = parse_field_selector(text)
    assert [(r.field, r.op, r.value) for r in selector.requirements] == requirements
    assert selector.empty is (not requirements)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a", "invalid selector: 'a'; can't understand 'a'"),
        ("x=1,a", "invalid selector: 'x=1,a'; can't understand 'a'"),
        (r"a=b\,c,d", r"invalid selector: 'a=b\,c,d'; can't understand 'd'"),
        # an unescaped ',' or '=' in a value: upstream prints the rune's number
        ("a=b=c", "invalid field selector: unescaped character in value: 61"),
        ("a==b=c", "invalid field selector: unescaped character in value: 61"),
        (r"a=b\c", "invalid field selector: invalid escape sequence: \\c"),
        ("a=b\\", "invalid field selector: invalid escape sequence: \\"),
    ],
)
def test_parse_field_selector_errors(text: str, message: str) -> None:
    """A bad field selector raises SelectorError with upstream's message."""
    with pytest.raises(SelectorError) as caught:
        parse_field_selector(text)
    assert caught.value.message == message


@pytest.mark.parametrize(
    ("text", "fields", "expected"),
    [
        ("", {}, True),
        ("metadata.name=foo", {"metadata.name": "foo"}, True),
        ("metadata.name=foo", {"metadata.name": "bar"}, False),
        ("metadata.name=foo", {}, False),
        ("spec.nodeName=", {}, True),  # an absent field counts as ""
        ("spec.nodeName!=", {}, False),
        ("spec.nodeName!=", {"spec.nodeName": "n1"}, True),
        ("status.phase!=Running", {}, True),
        ("status.phase!=Running", {"status.phase": "Running"}, False),
        ("a=1,b!=2", {"a": "1", "b": "3"}, True),
        ("a=1,b!=2", {"a": "1", "b": "2"}, False),
        (r"a=x\,y", {"a": "x,y"}, True),
    ],
)
def test_field_selector_matches(text: str, fields: dict[str, str], expected: bool) -> None:
    """A field selector matches the object's fields as upstream's fields.Selector does."""
    assert parse_field_selector(text).matches(fields) is expected


def test_field_selector_fields_and_exact_match() -> None:
    """A field selector names its fields and the exact value a field must have."""
    selector = parse_field_selector("metadata.name=a,spec.nodeName!=n,metadata.namespace==ns")
    assert selector.fields() == frozenset({"metadata.name", "metadata.namespace", "spec.nodeName"})
    assert selector.requires_exact_match("metadata.name") == "a"
    assert selector.requires_exact_match("metadata.namespace") == "ns"
    assert selector.requires_exact_match("spec.nodeName") is None
    assert FieldSelector().fields() == frozenset()


@pytest.mark.parametrize("value", ["plain", "", "a,b", "a=b", "back\\slash", "\\,=\\\\"])
def test_field_selector_string_escapes_and_round_trips(value: str) -> None:
    """A field selector's string escapes its values and parses back to the same selector."""
    selector = FieldSelector((FieldRequirement("metadata.name", "=", value),))
    assert parse_field_selector(str(selector)) == selector


def test_field_selector_string() -> None:
    """A field selector prints sorted, with == normalised to = and escapes kept."""
    assert str(parse_field_selector(r"b!=x\,y,a==1")) == r"a=1,b!=x\,y"


_SELECTOR_ALPHABET = st.sampled_from([*"ab_/.-=!(),<>\\ \t\n\x00", "in", "notin", "1"])


def _outcome(parse: Any, text: str) -> str:
    """The canonical string of a parsed selector, or the error message."""
    try:
        return str(parse(text))
    except SelectorError as error:
        return "error: " + error.message


@settings(max_examples=500, deadline=None)
@given(text=st.lists(_SELECTOR_ALPHABET, max_size=20).map("".join))
def test_any_text_parses_or_raises_selector_error(text: str) -> None:
    # nothing but SelectorError may escape, and an error always has a message
    """Any text either parses or raises SelectorError with a message, never anything else."""
    assert _outcome(parse_label_selector, text) != "error: "
    assert _outcome(parse_field_selector, text) != "error: "
