"""Field errors, 422 messages and the value validators, checked against upstream's texts.

Sources the expected strings were confirmed from (kubernetes/kubernetes staging and
kubernetes/apimachinery):

* [errors.go] ``pkg/util/validation/field/errors.go``: ``ErrorType.String``, ``ErrorBody``
  (strings ``%q``; int64/int32/float/bool ``%v``; anything else ``json.Marshal``, so nil
  is ``null`` and ``[]string`` is ``["a","b"]``), ``Required``/``Forbidden``/``TooLong``/
  ``InternalError`` bodies without the value, ``NotSupported``'s ``supported values:``,
  ``TooLong``'s ``may not be more than N bytes``, ``TooMany``, ``ToAggregate`` (dedup).
* [aggregate] ``pkg/util/errors/errors.go``: one error alone, several as ``[a, b]``.
* [api-errors] ``pkg/api/errors/errors.go`` ``NewInvalid``:
  ``%s %q is invalid: %v`` (just ``is invalid`` without errors), causes from ``ErrorBody``.
* [validation] ``pkg/util/validation/validation.go``: DNS-1123 label/subdomain, DNS-1035,
  ``MaxLenError`` (characters), ``RegexError``, ``InclusiveRangeError``.
* [content] ``pkg/api/validate/content/kube.go`` + ``errors.go``: ``IsLabelKey``
  (= ``IsQualifiedName``), ``IsLabelValue``; their ``MaxLenError`` says bytes.
* [ip] ``pkg/util/validation/ip.go``: ``IsValidIP`` / ``IsValidCIDR`` details.
* [objectmeta] ``pkg/api/validation/objectmeta.go`` (``ValidateAnnotations``,
  ``TotalAnnotationSizeLimitB``, ``ValidateFinalizers``) and
  ``pkg/apis/meta/v1/validation/validation.go`` (``ValidateLabels``).
"""

from __future__ import annotations

from typing import Any

import pytest

from trio_ccm_testbed.apiserver import fielderrors as fe
from trio_ccm_testbed.apiserver.fielderrors import ErrorType, FieldError

KEY_NAME_REGEX = (  # [content]
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_REGEX = (  # [content]
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
SUBDOMAIN_REGEX = (  # [validation] / [content]
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
DNS1123_LABEL_REGEX = (  # [validation]
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1035_LABEL_REGEX = (  # [validation]
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
PORT_RANGE = "must be between 1 and 65535, inclusive"  # [validation] InclusiveRangeError
IP_MESSAGE = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"  # [ip]
CIDR_MESSAGE = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"  # [ip]


# ----- ErrorType ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error_type", "text", "reason"),
    [  # [errors.go] ErrorType constants and String()
        (ErrorType.NOT_FOUND, "Not found", "FieldValueNotFound"),
        (ErrorType.REQUIRED, "Required value", "FieldValueRequired"),
        (ErrorType.DUPLICATE, "Duplicate value", "FieldValueDuplicate"),
        (ErrorType.INVALID, "Invalid value", "FieldValueInvalid"),
        (ErrorType.NOT_SUPPORTED, "Unsupported value", "FieldValueNotSupported"),
        (ErrorType.FORBIDDEN, "Forbidden", "FieldValueForbidden"),
        (ErrorType.TOO_LONG, "Too long", "FieldValueTooLong"),
        (ErrorType.TOO_MANY, "Too many", "FieldValueTooMany"),
        (ErrorType.INTERNAL, "Internal error", "InternalError"),
    ],
)
def test_error_types(error_type: ErrorType, text: str, reason: str) -> None:
    """Each field error type carries kube-apiserver's text and StatusCause reason."""
    assert error_type.value == (text, reason)
    assert error_type.text == text
    assert error_type.reason == reason


# ----- constructors and rendering --------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            fe.invalid("spec.ports[0].port", 70000, PORT_RANGE),
            f"spec.ports[0].port: Invalid value: 70000: {PORT_RANGE}",
        ),
        (
            fe.invalid("metadata.name", "Web", "bad"),
            'metadata.name: Invalid value: "Web": bad',
        ),
        (fe.invalid("spec.x", True, "d"), "spec.x: Invalid value: true: d"),
        (fe.invalid("spec.x", -3, ""), "spec.x: Invalid value: -3"),
        # Kubernetes 1.33 (which the emulator reports): nil is the quoted "null", simple slices
        # and maps print as Go's %#v; 1.34 moved every composite to JSON (PR 132314)
        (fe.invalid("spec.x", None, "d"), 'spec.x: Invalid value: "null": d'),
        (fe.invalid("spec.x", ["a", "b"], "d"), 'spec.x: Invalid value: []string{"a", "b"}: d'),
        (fe.invalid("spec.x", [], "d"), "spec.x: Invalid value: []: d"),
        (
            fe.invalid("spec.x", {"b": 1, "a": [True, None]}, "d"),
            'spec.x: Invalid value: {"a":[true,null],"b":1}: d',
        ),
        # json.Marshal escapes HTML characters and control characters
        (
            fe.invalid("spec.x", ["<a&b>", "tab\there\x01"], "d"),
            'spec.x: Invalid value: []string{"<a&b>", "tab\\there\\x01"}: d',
        ),
        (
            fe.required("metadata.name", "name or generateName is required"),
            "metadata.name: Required value: name or generateName is required",
        ),
        (fe.required("spec.selector"), "spec.selector: Required value"),
        (
            fe.forbidden("metadata.namespace", "not allowed on this type"),
            "metadata.namespace: Forbidden: not allowed on this type",
        ),
        (
            fe.not_supported("spec.type", "Balanced", ["ClusterIP", "NodePort", "LoadBalancer"]),
            'spec.type: Unsupported value: "Balanced": supported values: '
            '"ClusterIP", "NodePort", "LoadBalancer"',
        ),
        (fe.not_supported("spec.type", "x", []), 'spec.type: Unsupported value: "x"'),
        (fe.duplicate("spec.ports[1].port", 80), "spec.ports[1].port: Duplicate value: 80"),
        (
            fe.duplicate("spec.ports[1].name", "http"),
            'spec.ports[1].name: Duplicate value: "http"',
        ),
        (fe.not_found("spec.x", "y"), 'spec.x: Not found: "y"'),
        # TooLong never echoes the value
        (
            fe.too_long("metadata.annotations", "x" * 300_000, 262144),
            "metadata.annotations: Too long: may not be more than 262144 bytes",
        ),
        (fe.too_long("spec.x", "xx", 1), "spec.x: Too long: may not be more than 1 byte"),
        (fe.too_long("spec.x", "xx", -1), "spec.x: Too long: value is too long"),
        (fe.too_many("spec.x", 5, 1), "spec.x: Too many: 5: must have at most 1 item"),
        (fe.too_many("spec.x", -1, 3), "spec.x: Too many: must have at most 3 items"),
        (fe.too_many("spec.x", 4, -1), "spec.x: Too many: 4: has too many items"),
        (fe.internal_error("metadata.name", "boom"), "metadata.name: Internal error: boom"),
    ],
)
def test_error_strings(error: FieldError, expected: str) -> None:
    """A field error renders as `field: Type: detail`, as field.Error.Error() does."""
    assert str(error) == expected
    assert error.error_body() == expected.split(": ", 1)[1]


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        # strings: Go's %q (strconv.Quote)
        ("plain", '"plain"'),
        ('q"b\\s', '"q\\"b\\\\s"'),
        ("\a\b\f\n\r\t\v", '"\\a\\b\\f\\n\\r\\t\\v"'),
        ("\x00\x1f\x7f", '"\\x00\\x1f\\x7f"'),
        ("caf\u00e9 \u65e5\u672c", '"caf\u00e9 \u65e5\u672c"'),  # printable: kept
        ("\u00a0\u200b", '"\\u00a0\\u200b"'),  # not printable: escaped
        ("\U0001f600\U000e0001", '"\U0001f600\\U000e0001"'),
        # numbers and bools: %v
        (0, "0"),
        (9223372036854775807, "9223372036854775807"),
        (False, "false"),
        (1.5, "1.5"),
        (100000.0, "100000"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (-2.5e-10, "-2.5e-10"),
        (float("inf"), "+Inf"),
        # composites: json.Marshal (floats in JSON switch to exponents only past 1e21 / 1e-6)
        ([1.0, 1e20, 1e21, 1e-7], "[1,100000000000000000000,1e+21,1e-7]"),
        (("a",), '[]string{"a"}'),
        ({"k": "\u2028"}, 'map[string]string{"k":"\\u2028"}'),
    ],
)
def test_bad_value_rendering(value: Any, rendered: str) -> None:
    """A bad value is quoted the way Go's %#v-like rendering in field errors shows it."""
    assert fe.invalid("f", value, "").error_body() == f"Invalid value: {rendered}"


def test_no_value_marker() -> None:
    """An error without a value says just its type; NO_VALUE with a detail says the detail."""
    assert FieldError(ErrorType.INVALID, "f").error_body() == "Invalid value"
    assert FieldError(ErrorType.INVALID, "f", fe.NO_VALUE, "d").error_body() == "Invalid value: d"


def test_go_quote() -> None:
    """go_quote quotes a string as Go's strconv.Quote does."""
    assert fe.go_quote('web "1"') == '"web \\"1\\""'


def test_cause() -> None:  # [api-errors] NewInvalid's StatusCause
    """A field error becomes NewInvalid's StatusCause, with an empty field left out."""
    error = fe.invalid("spec.ports[0].port", 70000, PORT_RANGE)
    assert error.cause() == {
        "reason": "FieldValueInvalid",
        "message": f"Invalid value: 70000: {PORT_RANGE}",
        "field": "spec.ports[0].port",
    }
    # omitempty: an empty field is left out
    assert fe.required("", "x").cause() == {
        "reason": "FieldValueRequired",
        "message": "Required value: x",
    }


def test_field_error_is_frozen() -> None:
    """A FieldError cannot be changed once made."""
    error = fe.required("a")
    with pytest.raises(AttributeError):
        error.field = "b"  # type: ignore[misc]


# ----- 422 messages ------------------------------------------------------------------------


def test_invalid_message_single() -> None:  # [api-errors] + [aggregate]
    """One field error makes the `Kind "name" is invalid: ...` message unbracketed."""
    errors = [fe.invalid("spec.ports[0].port", 70000, PORT_RANGE)]
    assert fe.invalid_message("Service", "web", errors) == (
        f'Service "web" is invalid: spec.ports[0].port: Invalid value: 70000: {PORT_RANGE}'
    )


def test_invalid_message_several_and_duplicates() -> None:
    """Several field errors are bracketed and a repeated one is shown once."""
    first = fe.required("spec.ports[0].port")
    second = fe.not_supported("spec.type", "X", ["ClusterIP"])
    assert fe.invalid_message("Service", "web", [first, second, first]) == (
        'Service "web" is invalid: [spec.ports[0].port: Required value, '
        'spec.type: Unsupported value: "X": supported values: "ClusterIP"]'
    )


def test_invalid_message_group_name_quoting_and_no_errors() -> None:
    """The kind is qualified by its group, the name Go-quoted, and no errors leave no list."""
    error = fe.required("spec.selector")
    assert fe.invalid_message("Deployment", "w\u00e9b", [error], group="apps") == (
        'Deployment.apps "w\u00e9b" is invalid: spec.selector: Required value'
    )
    assert fe.invalid_message("Node", 'a"b', []) == 'Node "a\\"b" is invalid'


def test_aggregate_message() -> None:
    """Aggregated errors read as upstream's: empty, single, or bracketed, duplicates once."""
    one, two = fe.required("a"), fe.required("b")
    assert fe.aggregate_message([]) == ""
    assert fe.aggregate_message([one]) == "a: Required value"
    assert fe.aggregate_message([one, two, one]) == "[a: Required value, b: Required value]"


# ----- string validators ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "messages"),
    [
        ("example.com", []),
        ("a", []),
        ("Example.com", [SUBDOMAIN_REGEX]),
        ("", [SUBDOMAIN_REGEX]),
        ("a..b", [SUBDOMAIN_REGEX]),
        ("a" * 253, []),
        ("a" * 254, ["must be no more than 253 characters"]),
        ("a" * 254 + "-", ["must be no more than 253 characters", SUBDOMAIN_REGEX]),
    ],
)
def test_is_dns1123_subdomain(value: str, messages: list[str]) -> None:
    """DNS-1123 subdomain validation returns upstream's messages for each bad value."""
    assert fe.is_dns1123_subdomain(value) == messages


@pytest.mark.parametrize(
    ("value", "messages"),
    [
        ("my-name", []),
        ("123-abc", []),
        ("my.name", ["must not contain dots"]),
        ("My", [DNS1123_LABEL_REGEX]),
        ("-a", [DNS1123_LABEL_REGEX]),
        ("", [DNS1123_LABEL_REGEX]),
        ("a" * 64, ["must be no more than 63 characters"]),
    ],
)
def test_is_dns1123_label(value: str, messages: list[str]) -> None:
    """DNS-1123 label validation returns upstream's messages for each bad value."""
    assert fe.is_dns1123_label(value) == messages


@pytest.mark.parametrize(
    ("value", "messages"),
    [
        ("abc-123", []),
        ("1abc", [DNS1035_LABEL_REGEX]),
        ("a.b", [DNS1035_LABEL_REGEX]),
        ("a" * 64, ["must be no more than 63 characters"]),
    ],
)
def test_is_dns1035_label(value: str, messages: list[str]) -> None:
    """DNS-1035 label validation returns upstream's messages for each bad value."""
    assert fe.is_dns1035_label(value) == messages


@pytest.mark.parametrize(
    ("value", "messages"),
    [
        ("app", []),
        ("Uppercase_Is_OK_123", []),
        ("example.com/Key", []),
        ("a" * 253 + "/" + "b" * 63, []),
        ("a_", ["name part " + KEY_NAME_REGEX]),
        ("", ["name part must be non-empty", "name part " + KEY_NAME_REGEX]),
        ("a" * 64, ["name part must be no more than 63 characters"]),
        ("/a", ["prefix part must be non-empty"]),
        ("Example.com/a", ["prefix part " + SUBDOMAIN_REGEX]),
        ("a" * 254 + "/b", ["prefix part must be no more than 253 characters"]),
        (
            "a/b/c",
            [
                "a valid label key "
                + KEY_NAME_REGEX
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ],
        ),
    ],
)
def test_is_qualified_name(value: str, messages: list[str]) -> None:
    """Qualified-name validation (prefix/name) returns upstream's messages."""
    assert fe.is_qualified_name(value) == messages


@pytest.mark.parametrize(
    ("value", "messages"),
    [
        ("", []),
        ("v1.2_3-x", []),
        ("a" * 63, []),
        ("a" * 64, ["must be no more than 63 characters"]),
        ("-a", [LABEL_VALUE_REGEX]),
        ("a b", [LABEL_VALUE_REGEX]),
        # lengths are UTF-8 bytes, as Go's len()
        ("\u00e9" * 32, ["must be no more than 63 characters", LABEL_VALUE_REGEX]),
    ],
)
def test_is_valid_label_value(value: str, messages: list[str]) -> None:
    """Label-value validation returns upstream's messages."""
    assert fe.is_valid_label_value(value) == messages


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("10.9.8.7", True),
        ("255.255.255.255", True),
        ("010.009.8.7", True),  # ParseIPSloppy accepts leading zeros (read as decimal)
        ("2001:db8::ffff", True),
        ("::", True),
        ("::ffff:1.2.3.4", True),
        ("::ffff:01.2.3.4", True),
        ("", False),
        ("1.2.3", False),
        ("1.2.3.256", False),
        ("1.2.3.4.5", False),
        ("1.2.3.-4", False),
        ("1.2.3.4/32", False),
        ("fe80::1%eth0", False),  # no zones
        ("1::2::3", False),
        ("2001:db8::gggg", False),
        ("host.example", False),
    ],
)
def test_is_valid_ip(value: str, valid: bool) -> None:
    """IP validation accepts what Go's netip accepts and says upstream's message otherwise."""
    assert fe.is_valid_ip(value) == ([] if valid else [IP_MESSAGE])


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("10.9.8.0/24", True),
        ("10.9.8.1/24", True),  # host bits may be set
        ("10.9.8.0/0", True),
        ("10.9.8.0/032", True),  # the prefix length is read with leading zeros too
        ("2001:db8::/64", True),
        ("::/128", True),
        ("10.9.8.0/33", False),
        ("2001:db8::/129", False),
        ("10.9.8.0", False),
        ("10.9.8.0/", False),
        ("10.9.8.0/+1", False),
        ("10.9.8/24", False),
        ("/24", False),
    ],
)
def test_is_valid_cidr(value: str, valid: bool) -> None:
    """CIDR validation accepts what Go's netip accepts and says upstream's message otherwise."""
    assert fe.is_valid_cidr(value) == ([] if valid else [CIDR_MESSAGE])


# ----- ObjectMeta pieces ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (None, []),
        ({}, []),
        ({"app": "web", "example.com/tier": ""}, []),
        ({"a_": "x"}, [f'metadata.labels: Invalid value: "a_": name part {KEY_NAME_REGEX}']),
        ({"a": "x_"}, [f'metadata.labels: Invalid value: "x_": {LABEL_VALUE_REGEX}']),
        (
            {"b": "-", "a_": "ok"},
            [
                f'metadata.labels: Invalid value: "a_": name part {KEY_NAME_REGEX}',
                f'metadata.labels: Invalid value: "-": {LABEL_VALUE_REGEX}',
            ],
        ),
    ],
)
def test_validate_labels(labels: Any, expected: list[str]) -> None:
    """metadata.labels are validated key by key and value by value, as upstream words it."""
    assert [str(e) for e in fe.validate_labels(labels, "metadata.labels")] == expected


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        (None, []),
        ({"Example.com/Some-Key": "any value at all\n"}, []),  # keys checked lower-cased
        ({"a b": "v"}, [f'metadata.annotations: Invalid value: "a b": name part {KEY_NAME_REGEX}']),
        ({"a": "x" * (256 * 1024 - 1)}, []),  # exactly at the limit: keys count too
        (
            {"a": "x" * (256 * 1024)},
            ["metadata.annotations: Too long: may not be more than 262144 bytes"],
        ),
        (
            {"a": "\u00e9" * (128 * 1024)},  # 2 bytes each: the size is in bytes
            ["metadata.annotations: Too long: may not be more than 262144 bytes"],
        ),
    ],
)
def test_validate_annotations(annotations: Any, expected: list[str]) -> None:
    """metadata.annotations are validated by key and by total size, as upstream words it."""
    assert [str(e) for e in fe.validate_annotations(annotations, "metadata.annotations")] == (
        expected
    )


@pytest.mark.parametrize(
    ("finalizers", "expected"),
    [
        (None, []),
        (["example.com/cleanup", "kubernetes", "orphan"], []),
        # upstream does not reject repeated finalizers
        (["example.com/a", "example.com/a"], []),
        (["a_"], [f'metadata.finalizers: Invalid value: "a_": name part {KEY_NAME_REGEX}']),
        (
            ["orphan", "foregroundDeletion"],
            [
                'metadata.finalizers: Invalid value: []string{"orphan", "foregroundDeletion"}: '
                "finalizer orphan and foregroundDeletion cannot be both set"
            ],
        ),
    ],
)
def test_validate_finalizers(finalizers: Any, expected: list[str]) -> None:
    """metadata.finalizers are validated as qualified names, as upstream words it."""
    assert [str(e) for e in fe.validate_finalizers(finalizers, "metadata.finalizers")] == expected


@pytest.mark.parametrize(
    ("validator", "value"),
    [
        (fe.validate_labels, ["a"]),
        (fe.validate_labels, {"a": 1}),
        (fe.validate_annotations, "a=b"),
        (fe.validate_finalizers, "a"),
        (fe.validate_finalizers, [1]),
    ],
)
def test_validators_refuse_undecodable_shapes(validator: Any, value: Any) -> None:
    """A validator handed a shape the decoder would have refused raises TypeError."""
    with pytest.raises(TypeError):
        validator(value, "metadata.x")
