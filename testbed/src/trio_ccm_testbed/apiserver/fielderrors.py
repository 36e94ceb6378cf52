"""Field-level validation errors and the value validators the emulator uses.

This mirrors ``k8s.io/apimachinery/pkg/util/validation/field`` (``field.Error``,
``ErrorList.ToAggregate``), ``k8s.io/apimachinery/pkg/api/errors.NewInvalid``,
the string validators of ``pkg/util/validation`` and ``pkg/api/validate/content``
and the ObjectMeta checks of ``pkg/api/validation/objectmeta.go`` and
``pkg/apis/meta/v1/validation``, so that the emulator answers with the very
texts a current kube-apiserver returns.  The code here is ours; only the message
texts (facts a client can observe) follow upstream.

Upstream snapshot the texts follow (upstream ``master`` as of the 1.34+ line):

* A bad value is rendered as in ``field.Error.ErrorBody``: strings with Go's
  ``%q``, integers/floats/bools with ``%v``, and everything else (``None``,
  lists, dicts) as Go's ``encoding/json`` would print it -- so ``None`` is
  ``null`` and ``["a", "b"]`` is ``["a","b"]``.  Before kubernetes/kubernetes
  PR 132314 (June 2025, i.e. Kubernetes <= 1.33) composite values were printed
  with ``%#v`` (``[]string{"a", "b"}``) and a nil value as ``"null"``.
* ``Required``, ``Forbidden``, ``TooLong`` and ``Internal error`` never echo
  the value; ``TooLong`` says ``may not be more than N bytes`` (since PR 128553,
  Kubernetes 1.32; before that ``must have at most N bytes``).
* Label keys and values are checked by ``content.IsLabelKey`` /
  ``content.IsLabelValue`` whose length message says ``bytes``
  (``name part must be no more than 63 bytes``); the DNS-1123/1035 validators
  of ``pkg/util/validation`` still say ``characters``.
"""

from __future__ import annotations

import decimal
import enum
import functools
import ipaddress
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "NO_VALUE",
    "TOTAL_ANNOTATION_SIZE_LIMIT_BYTES",
    "ErrorType",
    "FieldError",
    "aggregate_message",
    "duplicate",
    "forbidden",
    "go_quote",
    "internal_error",
    "invalid",
    "invalid_message",
    "is_dns1035_label",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "is_qualified_name",
    "is_valid_cidr",
    "is_valid_ip",
    "is_valid_label_value",
    "not_found",
    "not_supported",
    "required",
    "too_long",
    "too_many",
    "validate_annotations",
    "validate_finalizers",
    "validate_labels",
]


class ErrorType(enum.Enum):
    """The kind of a field error: its human text and its Status cause reason."""

    NOT_FOUND = ("Not found", "FieldValueNotFound")
    REQUIRED = ("Required value", "FieldValueRequired")
    DUPLICATE = ("Duplicate value", "FieldValueDuplicate")
    INVALID = ("Invalid value", "FieldValueInvalid")
    NOT_SUPPORTED = ("Unsupported value", "FieldValueNotSupported")
    FORBIDDEN = ("Forbidden", "FieldValueForbidden")
    TOO_LONG = ("Too long", "FieldValueTooLong")
    TOO_MANY = ("Too many", "FieldValueTooMany")
    INTERNAL = ("Internal error", "InternalError")

    @property
    def text(self) -> str:
        """The human text, e.g. ``Invalid value``."""
        text: str = self.value[0]
        return text

    @property
    def reason(self) -> str:
        """The machine reason used as a Status cause's ``reason``."""
        reason: str = self.value[1]
        return reason


class _NoValue:
    """Marker for a field error that carries no value (Go's ``omitValue``)."""

    _instance: _NoValue | None = None

    def __new__(cls) -> _NoValue:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NO_VALUE"


NO_VALUE: Final = _NoValue()
"""``bad_value`` of a :class:`FieldError` whose value is not printed."""

# Error types whose body never shows the bad value (ErrorBody in errors.go).
_VALUELESS_TYPES: Final = frozenset(
    {ErrorType.REQUIRED, ErrorType.FORBIDDEN, ErrorType.TOO_LONG, ErrorType.INTERNAL}
)


@dataclass(frozen=True)
class FieldError:
    """One field-level validation error, like Go's ``*field.Error``."""

    type: ErrorType
    field: str
    bad_value: Any = NO_VALUE
    detail: str = ""

    def error_body(self) -> str:
        """The message without the field name, e.g. ``Invalid value: 70000: must be ...``."""
        if self.type in _VALUELESS_TYPES or self.bad_value is NO_VALUE:
            body = self.type.text
        else:
            body = f"{self.type.text}: {_render_bad_value(self.bad_value)}"
        if self.detail:
            body += f": {self.detail}"
        return body

    def cause(self) -> dict[str, str]:
        """The ``details.causes[]`` entry of a 422 Status for this error.

        Keys whose value is empty are left out, as Go's ``omitempty`` does.
        """
        cause = {"reason": self.type.reason, "message": self.error_body(), "field": self.field}
        return {key: value for key, value in cause.items() if value}

    def __str__(self) -> str:
        return f"{self.field}: {self.error_body()}"


# --- constructors, like field.Required, field.Invalid, ... -------------------------------


def required(field: str, detail: str = "") -> FieldError:
    """``field.Required``: a required value is missing."""
    return FieldError(ErrorType.REQUIRED, field, "", detail)


def invalid(field: str, value: Any, detail: str) -> FieldError:
    """``field.Invalid``: a malformed value."""
    return FieldError(ErrorType.INVALID, field, value, detail)


def not_supported(field: str, value: Any, supported: Sequence[str]) -> FieldError:
    """``field.NotSupported``: a value outside an enumeration."""
    detail = ""
    if supported:
        detail = "supported values: " + ", ".join(go_quote(str(item)) for item in supported)
    return FieldError(ErrorType.NOT_SUPPORTED, field, value, detail)


def duplicate(field: str, value: Any) -> FieldError:
    """``field.Duplicate``: a value that must be unique is repeated."""
    return FieldError(ErrorType.DUPLICATE, field, value)


def forbidden(field: str, detail: str) -> FieldError:
    """``field.Forbidden``: a value not permitted under the current conditions."""
    return FieldError(ErrorType.FORBIDDEN, field, "", detail)


def too_long(field: str, value: Any, max_length: int) -> FieldError:
    """``field.TooLong``: the value is never echoed; ``value`` is unused, as upstream."""
    del value  # upstream ignores it too, so that huge values never reach a message
    if max_length >= 0:
        unit = "byte" if max_length == 1 else "bytes"
        detail = f"may not be more than {max_length} {unit}"
    else:
        detail = "value is too long"
    return FieldError(ErrorType.TOO_LONG, field, "<value omitted>", detail)


def too_many(field: str, actual: int, max_quantity: int) -> FieldError:
    """``field.TooMany``: a list has too many items (a negative ``actual`` is not shown)."""
    if max_quantity >= 0:
        unit = "item" if max_quantity == 1 else "items"
        detail = f"must have at most {max_quantity} {unit}"
    else:
        detail = "has too many items"
    bad: Any = actual if actual >= 0 else NO_VALUE
    return FieldError(ErrorType.TOO_MANY, field, bad, detail)


def not_found(field: str, value: Any) -> FieldError:
    """``field.NotFound``: a referenced value does not exist."""
    return FieldError(ErrorType.NOT_FOUND, field, value)


def internal_error(field: str, error: BaseException | str) -> FieldError:
    """``field.InternalError``: something not caused by the user's input."""
    return FieldError(ErrorType.INTERNAL, field, NO_VALUE, str(error))


# --- messages built from error lists --------------------------------------------------------


def aggregate_message(errors: Sequence[FieldError]) -> str:
    """The text of ``ErrorList.ToAggregate()``: duplicates dropped, ``[a, b]`` when several."""
    texts: list[str] = []
    for error in errors:
        text = str(error)
        if text not in texts:
            texts.append(text)
    if len(texts) == 1:
        return texts[0]
    if not texts:
        return ""
    return "[" + ", ".join(texts) + "]"


def invalid_message(kind: str, name: str, errors: Sequence[FieldError], *, group: str = "") -> str:
    """The ``message`` of a 422 Invalid Status, as ``errors.NewInvalid`` builds it.

    ``kind`` and ``group`` form Go's ``GroupKind.String()``: ``Service`` for the
    core group, ``Deployment.apps`` for ``kind="Deployment", group="apps"``.
    """
    qualified = f"{kind}.{group}" if group else kind
    head = f"{qualified} {go_quote(name)} is invalid"
    if not errors:
        return head
    return f"{head}: {aggregate_message(errors)}"


# --- rendering values the way Go prints them --------------------------------------------

_GO_SHORT_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def go_quote(text: str) -> str:
    """Quote ``text`` as Go's ``strconv.Quote`` / ``%q`` does."""
    parts = ['"']
    for char in text:
        code = ord(char)
        if char in ('"', "\\"):
            parts.append("\\" + char)
        elif 0xD800 <= code <= 0xDFFF:
            # A lone surrogate cannot be in a Go string; a JSON decoder turns it into U+FFFD.
            parts.append("\ufffd")
        elif char.isprintable():
            parts.append(char)
        elif char in _GO_SHORT_ESCAPES:
            parts.append(_GO_SHORT_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            parts.append(f"\\x{code:02x}")
        elif code < 0x10000:
            parts.append(f"\\u{code:04x}")
        else:
            parts.append(f"\\U{code:08x}")
    parts.append('"')
    return "".join(parts)


def _render_bad_value(value: Any) -> str:
    """A bad value as Kubernetes 1.33's ``field.Error.ErrorBody`` prints it.

    nil becomes the quoted string "null"; strings are %q-quoted; numbers and bools print
    plainly; slices and maps of simple values print as Go's ``%#v`` does
    (``[]string{"a", "b"}``, ``map[string]string{"k":"v"}``). Anything else falls back
    to compact JSON (1.34 switched every composite value to JSON).
    """
    if value is None:
        return go_quote("null")
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float_v(value)
    if isinstance(value, list | tuple) and value:
        if all(isinstance(item, str) for item in value):
            return "[]string{" + ", ".join(go_quote(item) for item in value) + "}"
        if all(isinstance(item, int) and not isinstance(item, bool) for item in value):
            return "[]int{" + ", ".join(str(item) for item in value) + "}"
    if (
        isinstance(value, Mapping)
        and value
        and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    ):
        inner = ", ".join(f"{go_quote(k)}:{go_quote(v)}" for k, v in sorted(value.items()))
        return "map[string]string{" + inner + "}"
    if _json_encodable(value):
        return _go_json(value)
    return str(value)


def _json_encodable(value: Any) -> bool:
    if value is None or isinstance(value, str | bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, Mapping):
        return all(
            isinstance(key, str | int) and _json_encodable(item) for key, item in value.items()
        )
    if isinstance(value, list | tuple | set | frozenset):
        return all(_json_encodable(item) for item in value)
    return False


def _go_json(value: Any) -> str:
    """Compact JSON as Go's ``json.Marshal`` writes it (HTML-safe, map keys sorted)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return _go_json_string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_json_float(value)
    if isinstance(value, Mapping):
        items = sorted((str(key), item) for key, item in value.items())
        return "{" + ",".join(f"{_go_json_string(k)}:{_go_json(v)}" for k, v in items) + "}"
    if isinstance(value, set | frozenset):
        value = sorted(value, key=repr)
    return "[" + ",".join(_go_json(item) for item in value) + "]"


_JSON_ESCAPES: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def _go_json_string(text: str) -> str:
    parts = ['"']
    for char in text:
        code = ord(char)
        if char in _JSON_ESCAPES:
            parts.append(_JSON_ESCAPES[char])
        elif code < 0x20:
            parts.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            parts.append("\\ufffd")
        else:
            parts.append(char)
    parts.append('"')
    return "".join(parts)


def _shortest_digits(value: float) -> tuple[bool, str, int]:
    """Sign, shortest round-trip digits and decimal exponent of a finite float."""
    parsed = decimal.Decimal(repr(value)).normalize()
    sign, digit_tuple, exponent = parsed.as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(str(digit) for digit in digit_tuple)
    if digits.strip("0") == "":
        return bool(sign), "0", 0
    return bool(sign), digits, exponent


def _format_fixed(negative: bool, digits: str, exponent: int) -> str:
    if exponent >= 0:
        text = digits + "0" * exponent
    else:
        point = len(digits) + exponent
        text = "0." + "0" * -point + digits if point <= 0 else digits[:point] + "." + digits[point:]
    return ("-" if negative else "") + text


def _format_exponent(negative: bool, digits: str, exponent: int, min_exp_digits: int) -> str:
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    power = len(digits) - 1 + exponent
    exp_sign = "-" if power < 0 else "+"
    exp_text = str(abs(power)).rjust(min_exp_digits, "0")
    return ("-" if negative else "") + f"{mantissa}e{exp_sign}{exp_text}"


def _go_float_v(value: float) -> str:
    """A float64 as Go's ``%v`` prints it (shortest ``%g``, exponent from 1e+06 / 1e-05 on)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    negative, digits, exponent = _shortest_digits(value)
    if digits == "0":
        return "-0" if negative else "0"
    power = len(digits) - 1 + exponent
    if power < -4 or power >= 6:
        return _format_exponent(negative, digits, exponent, 2)
    return _format_fixed(negative, digits, exponent)


def _go_json_float(value: float) -> str:
    """A float64 as Go's ``encoding/json`` writes it."""
    negative, digits, exponent = _shortest_digits(value)
    if digits == "0":
        return "-0" if negative else "0"
    magnitude = abs(value)
    if magnitude < 1e-6 or magnitude >= 1e21:
        return _format_exponent(negative, digits, exponent, 1)
    return _format_fixed(negative, digits, exponent)


# --- string validators (pkg/util/validation, pkg/api/validate/content) ----------------------

_LABEL_KEY_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_ERR: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_KEY_MAX: Final = 63
_LABEL_VALUE_FMT: Final = f"({_LABEL_KEY_FMT})?"
_LABEL_VALUE_ERR: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, "
    "'-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_MAX: Final = 63
_DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_ERR: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
    "or '-', and must start and end with an alphanumeric character"
)
_DNS1123_LABEL_MAX: Final = 63
_DNS1123_SUBDOMAIN_FMT: Final = f"{_DNS1123_LABEL_FMT}(\\.{_DNS1123_LABEL_FMT})*"
_DNS1123_SUBDOMAIN_ERR: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MAX: Final = 253
_DNS1035_LABEL_FMT: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_LABEL_ERR: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
    "start with an alphabetic character, and end with an alphanumeric character"
)
_DNS1035_LABEL_MAX: Final = 63

_LABEL_KEY_RE: Final = re.compile(_LABEL_KEY_FMT)
_LABEL_VALUE_RE: Final = re.compile(_LABEL_VALUE_FMT)
_DNS1123_LABEL_RE: Final = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN_RE: Final = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL_RE: Final = re.compile(_DNS1035_LABEL_FMT)


def _byte_len(text: str) -> int:
    """Go's ``len`` of a string: its UTF-8 size."""
    return len(text.encode("utf-8", "surrogatepass"))


def _regex_error(message: str, pattern: str, *examples: str) -> str:
    """``validation.RegexError``: the message, examples and the regex shown to the user."""
    if not examples:
        return f"{message} (regex used for validation is '{pattern}')"
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{pattern}')"


def _max_len_characters(length: int) -> str:
    return f"must be no more than {length} characters"  # validation.MaxLenError


def _max_len_bytes(length: int) -> str:
    return f"must be no more than {length} characters"  # 1.33 validation.MaxLenError


def _subdomain_errors(value: str, too_long: str) -> list[str]:
    errors: list[str] = []
    if _byte_len(value) > _DNS1123_SUBDOMAIN_MAX:
        errors.append(too_long)
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errors.append(_regex_error(_DNS1123_SUBDOMAIN_ERR, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errors


def is_dns1123_subdomain(value: str) -> list[str]:
    """``validation.IsDNS1123Subdomain`` (object names such as a Service's or a Node's)."""
    return _subdomain_errors(value, _max_len_characters(_DNS1123_SUBDOMAIN_MAX))


def is_dns1123_label(value: str) -> list[str]:
    """``validation.IsDNS1123Label`` (e.g. namespace names)."""
    errors: list[str] = []
    if _byte_len(value) > _DNS1123_LABEL_MAX:
        errors.append(_max_len_characters(_DNS1123_LABEL_MAX))
    if not _DNS1123_LABEL_RE.fullmatch(value):
        if _DNS1123_SUBDOMAIN_RE.fullmatch(value):
            # A valid subdomain but not a label: the length was checked, so it is the dots.
            errors.append("must not contain dots")
        else:
            errors.append(
                _regex_error(_DNS1123_LABEL_ERR, _DNS1123_LABEL_FMT, "my-name", "123-abc")
            )
    return errors


def is_dns1035_label(value: str) -> list[str]:
    """``validation.IsDNS1035Label`` (e.g. Service names, port names' older rule)."""
    errors: list[str] = []
    if _byte_len(value) > _DNS1035_LABEL_MAX:
        errors.append(_max_len_characters(_DNS1035_LABEL_MAX))
    if not _DNS1035_LABEL_RE.fullmatch(value):
        errors.append(_regex_error(_DNS1035_LABEL_ERR, _DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errors


def is_qualified_name(value: str) -> list[str]:
    """``validation.IsQualifiedName`` (= ``content.IsLabelKey``): ``[prefix/]name``."""
    errors: list[str] = []
    prefix, slash, suffix = value.partition("/")
    if not slash:
        name = value
    elif "/" in suffix:
        return [
            "a valid label key "
            + _regex_error(_LABEL_KEY_ERR, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    else:
        name = suffix
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend(
                "prefix part " + message
                for message in _subdomain_errors(prefix, _max_len_bytes(_DNS1123_SUBDOMAIN_MAX))
            )
    if not name:
        errors.append("name part must be non-empty")
    elif _byte_len(name) > _LABEL_KEY_MAX:
        errors.append("name part " + _max_len_bytes(_LABEL_KEY_MAX))
    if not _LABEL_KEY_RE.fullmatch(name):
        errors.append(
            "name part "
            + _regex_error(_LABEL_KEY_ERR, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
        )
    return errors


def is_valid_label_value(value: str) -> list[str]:
    """``validation.IsValidLabelValue`` (= ``content.IsLabelValue``)."""
    errors: list[str] = []
    if _byte_len(value) > _LABEL_VALUE_MAX:
        errors.append(_max_len_bytes(_LABEL_VALUE_MAX))
    if not _LABEL_VALUE_RE.fullmatch(value):
        errors.append(
            _regex_error(_LABEL_VALUE_ERR, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errors


# IP parsing follows k8s.io/utils/net's ParseIPSloppy / ParseCIDRSloppy (the Go 1.16
# parser): IPv4 octets may carry leading zeros (read as decimal), IPv6 groups may be
# zero-padded past four digits, and zones (``%eth0``) are refused.
_DECIMAL_RE: Final = re.compile("[0-9]+")
_HEX_RE: Final = re.compile("[0-9A-Fa-f]+")


def _parse_ipv4_sloppy(text: str) -> ipaddress.IPv4Address | None:
    octets = text.split(".")
    if len(octets) != 4 or not all(_DECIMAL_RE.fullmatch(octet) for octet in octets):
        return None
    numbers = [int(octet) for octet in octets]
    if any(number > 0xFF for number in numbers):
        return None
    return ipaddress.IPv4Address(".".join(str(number) for number in numbers))


def _parse_ip_sloppy(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if ":" not in text:
        return _parse_ipv4_sloppy(text)
    if "%" in text:
        return None
    groups = text.split(":")
    normalised: list[str] = []
    for index, group in enumerate(groups):
        if group == "":
            normalised.append(group)
        elif "." in group and index == len(groups) - 1:
            embedded = _parse_ipv4_sloppy(group)
            if embedded is None:
                return None
            normalised.append(str(embedded))
        elif _HEX_RE.fullmatch(group) and int(group, 16) <= 0xFFFF:
            normalised.append(f"{int(group, 16):x}")
        else:
            return None
    try:
        return ipaddress.IPv6Address(":".join(normalised))
    except ValueError:
        return None


def is_valid_ip(value: str) -> list[str]:
    """``validation.IsValidIP``'s message for a value that is not an IP address."""
    if _parse_ip_sloppy(value) is None:
        return ["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"]
    return []


def is_valid_cidr(value: str) -> list[str]:
    """``validation.IsValidCIDR``'s message for a value that is not a CIDR."""
    message = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
    address, slash, prefix = value.partition("/")
    if not slash or not _DECIMAL_RE.fullmatch(prefix):
        return [message]
    parsed = _parse_ip_sloppy(address)
    if parsed is None or int(prefix) > parsed.max_prefixlen:
        return [message]
    return []


# --- ObjectMeta pieces -----------------------------------------------------------------------

TOTAL_ANNOTATION_SIZE_LIMIT_BYTES: Final = 256 * 1024
_FINALIZER_ORPHAN: Final = "orphan"
_FINALIZER_FOREGROUND: Final = "foregroundDeletion"


def _string_map(value: Any, what: str) -> Mapping[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(key, str) and isinstance(item, str) for key, item in value.items()
    ):
        # The apiserver rejects such a body while decoding it, before any validation.
        raise TypeError(f"{what} must be a mapping of strings to strings")
    return value


@functools.lru_cache(maxsize=8192)
def _qualified_name_messages(value: str) -> tuple[str, ...]:
    """Cached: the same label and annotation keys are checked on every write."""
    return tuple(is_qualified_name(value))


@functools.lru_cache(maxsize=8192)
def _label_value_messages(value: str) -> tuple[str, ...]:
    return tuple(is_valid_label_value(value))


def validate_labels(labels: Any, path: str) -> list[FieldError]:
    """``ValidateLabels``: keys are qualified names, values label values (keys sorted)."""
    errors: list[FieldError] = []
    for key, value in sorted(_string_map(labels, "labels").items()):
        errors.extend(invalid(path, key, message) for message in _qualified_name_messages(key))
        errors.extend(invalid(path, value, message) for message in _label_value_messages(value))
    return errors


def validate_annotations(annotations: Any, path: str) -> list[FieldError]:
    """``ValidateAnnotations``: keys are qualified names when lower-cased; total size capped."""
    mapping = _string_map(annotations, "annotations")
    errors: list[FieldError] = []
    for key in sorted(mapping):
        errors.extend(
            invalid(path, key, message) for message in _qualified_name_messages(key.lower())
        )
    total = sum(_byte_len(key) + _byte_len(value) for key, value in mapping.items())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_BYTES:
        errors.append(too_long(path, "", TOTAL_ANNOTATION_SIZE_LIMIT_BYTES))
    return errors


def validate_finalizers(finalizers: Any, path: str) -> list[FieldError]:
    """``ValidateFinalizers``: each is a qualified name; ``orphan`` excludes ``foregroundDeletion``.

    Upstream reports every bad name at the list's path (not indexed) and does not
    reject repeated finalizers, so neither does this.
    """
    if finalizers is None:
        return []
    if not isinstance(finalizers, list | tuple) or not all(
        isinstance(item, str) for item in finalizers
    ):
        raise TypeError("finalizers must be a list of strings")
    errors: list[FieldError] = []
    for finalizer in finalizers:
        errors.extend(invalid(path, finalizer, message) for message in is_qualified_name(finalizer))
    if _FINALIZER_ORPHAN in finalizers and _FINALIZER_FOREGROUND in finalizers:
        errors.append(
            invalid(
                path,
                list(finalizers),
                f"finalizer {_FINALIZER_ORPHAN} and {_FINALIZER_FOREGROUND} cannot be both set",
            )
        )
    return errors
