"""Label and field selectors with kube-apiserver's grammar, semantics and error texts.

Label selectors follow ``k8s.io/apimachinery/pkg/labels/selector.go`` (``Parse``,
``Requirement.Matches``, ``String``) and ``metav1.LabelSelectorAsSelector``; field
selectors follow ``k8s.io/apimachinery/pkg/fields/selector.go`` (``ParseSelector``
with its backslash escapes).  The parsers are ours; what a client can observe --
which strings parse, what they match, the canonical string and the error
messages the apiserver returns with a 400 -- follows upstream.

Label selector grammar::

    selector    := requirement ( "," requirement )*
    requirement := [ "!" ] KEY [ set-restriction | exact-restriction ]
    set-restriction   := ( "in" | "notin" ) "(" [ VALUE ( "," VALUE )* ] ")"
    exact-restriction := ( "=" | "==" | "!=" | ">" | "<" ) VALUE

``KEY`` is a qualified name, ``VALUE`` a label value (possibly empty); blanks
(space, tab, CR, LF) may separate tokens.  ``>`` / ``<`` (``gt`` / ``lt``) compare
integers; upstream accepts them, so this module does too.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from trio_ccm_testbed.apiserver.fielderrors import (
    FieldError,
    aggregate_message,
    go_quote,
    invalid,
    is_qualified_name,
    is_valid_label_value,
)

__all__ = [
    "FieldRequirement",
    "FieldSelector",
    "LabelOperator",
    "LabelRequirement",
    "LabelSelector",
    "SelectorError",
    "label_selector_from_object",
    "parse_field_selector",
    "parse_label_selector",
]


class SelectorError(ValueError):
    """An unparsable selector; ``message`` is what the apiserver answers (400 BadRequest)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# ===== label selectors =======================================================================

LabelOperator = Literal["=", "==", "!=", "in", "notin", "exists", "!", "gt", "lt"]
"""``selection.Operator`` values: ``exists`` is a bare key, ``!`` a negated bare key."""

_SET_OPERATORS: Final = frozenset({"in", "notin"})
_EXACT_OPERATORS: Final = frozenset({"=", "==", "!="})
_UNARY_OPERATORS: Final = frozenset({"exists", "!"})
_INTEGER_OPERATORS: Final = frozenset({"gt", "lt"})
# binaryOperators in selector.go, in its order: listed when an operator is missing.
_BINARY_OPERATOR_LIST: Final = "in, notin, =, ==, !=, gt, lt"
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_GO_INT_RE: Final = re.compile("[+-]?[0-9]+")


def _parse_int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``, or ``None`` where it fails."""
    if not _GO_INT_RE.fullmatch(text):
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


@dataclass(frozen=True)
class LabelRequirement:
    """One requirement of a label selector: a key, an operator and its values."""

    key: str
    operator: LabelOperator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this requirement (``Requirement.Matches``)."""
        op = self.operator
        present = self.key in labels
        if op in ("in", "=", "=="):
            return present and labels[self.key] in self.values
        if op in ("notin", "!="):
            return not present or labels[self.key] not in self.values
        if op == "exists":
            return present
        if op == "!":
            return not present
        # gt / lt: both sides must be integers
        if not present or len(self.values) != 1:
            return False
        have = _parse_int64(labels[self.key])
        want = _parse_int64(self.values[0])
        if have is None or want is None:
            return False
        return have > want if op == "gt" else have < want

    def __str__(self) -> str:
        op = self.operator
        if op == "exists":
            return self.key
        if op == "!":
            return "!" + self.key
        shown = self.values[0] if len(self.values) == 1 else ",".join(sorted(self.values))
        if op in _SET_OPERATORS:
            return f"{self.key} {op} ({shown})"
        symbol = {"gt": ">", "lt": "<"}.get(op, op)
        return f"{self.key}{symbol}{shown}"


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector: all requirements must hold (an AND).

    ``LabelSelector()`` matches everything; :meth:`nothing` matches no object.
    """

    requirements: tuple[LabelRequirement, ...] = ()
    matches_nothing: bool = field(default=False, repr=False)

    @classmethod
    def nothing(cls) -> LabelSelector:
        """The selector of a nil ``metav1.LabelSelector``: it selects no object."""
        return cls((), matches_nothing=True)

    @property
    def empty(self) -> bool:
        """True when the selector does not restrict anything (``Selector.Empty``)."""
        return not self.matches_nothing and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with ``labels`` is selected."""
        if self.matches_nothing:
            return False
        return all(requirement.matches(labels) for requirement in self.requirements)

    def requires_exact_match(self, key: str) -> str | None:
        """The value ``key`` must have when the selector pins it to one, else ``None``."""
        for requirement in self.requirements:
            if requirement.key == key:
                if requirement.operator in ("=", "==", "in") and len(requirement.values) == 1:
                    return requirement.values[0]
                return None
        return None

    def __str__(self) -> str:
        return ",".join(str(requirement) for requirement in self.requirements)


def _new_requirement(
    key: str, operator: LabelOperator, values: list[str] | None
) -> tuple[LabelRequirement, list[FieldError]]:
    """``labels.NewRequirement`` without a field path: the requirement and its errors.

    ``values=None`` stands for a nil Go slice (printed ``null`` in a message).
    """
    given = values or []
    errors: list[FieldError] = []
    key_problems = is_qualified_name(key)
    if key_problems:
        errors.append(invalid("key", key, "; ".join(key_problems)))
    if operator in _SET_OPERATORS:
        if not given:
            errors.append(
                invalid("values", values, "for 'in', 'notin' operators, values set can't be empty")
            )
    elif operator in _EXACT_OPERATORS:
        if len(given) != 1:
            errors.append(
                invalid("values", values, "exact-match compatibility requires one single value")
            )
    elif operator in _UNARY_OPERATORS:
        if given:
            errors.append(
                invalid("values", values, "values set must be empty for exists and does not exist")
            )
    else:
        if len(given) != 1:
            errors.append(
                invalid("values", values, "for 'Gt', 'Lt' operators, exactly one value is required")
            )
        errors.extend(
            invalid(
                f"values[{index}]", value, "for 'Gt', 'Lt' operators, the value must be an integer"
            )
            for index, value in enumerate(given)
            if _parse_int64(value) is None
        )
    for index, value in enumerate(given):
        problems = is_valid_label_value(value)
        if problems:
            errors.append(invalid(f"values[{index}][{key}]", value, "; ".join(problems)))
    return LabelRequirement(key, operator, tuple(given)), errors


class _Tok(enum.Enum):
    ERROR = enum.auto()
    END = enum.auto()
    CLOSE_PAREN = enum.auto()
    COMMA = enum.auto()
    NOT = enum.auto()
    DOUBLE_EQUALS = enum.auto()
    EQUALS = enum.auto()
    GREATER = enum.auto()
    IDENTIFIER = enum.auto()
    IN = enum.auto()
    LESS = enum.auto()
    NOT_EQUALS = enum.auto()
    NOT_IN = enum.auto()
    OPEN_PAREN = enum.auto()


_KEYWORDS: Final = {
    ")": _Tok.CLOSE_PAREN,
    ",": _Tok.COMMA,
    "!": _Tok.NOT,
    "==": _Tok.DOUBLE_EQUALS,
    "=": _Tok.EQUALS,
    ">": _Tok.GREATER,
    "in": _Tok.IN,
    "<": _Tok.LESS,
    "!=": _Tok.NOT_EQUALS,
    "notin": _Tok.NOT_IN,
    "(": _Tok.OPEN_PAREN,
}
_SYMBOL_CHARS: Final = frozenset("=!(),><")
_BLANKS: Final = frozenset(" \t\r\n")
_END: Final = "\0"  # Go's lexer reads a NUL byte at the end, and stops at a real NUL too


def _tokenize(text: str) -> list[tuple[_Tok, str]]:
    """Split a label selector into tokens, ending with the first END token.

    Like upstream's lexer this treats a NUL character like the end of input where a
    token would start, and as a terminator inside a token.
    """
    pos = 0

    def read() -> str:
        nonlocal pos
        if pos < len(text):
            pos += 1
            return text[pos - 1]
        return _END

    def unread() -> None:
        nonlocal pos
        pos -= 1

    def symbol() -> tuple[_Tok, str]:
        buffer = ""
        best: tuple[_Tok, str] | None = None
        while True:
            char = read()
            if char == _END:
                break
            if char not in _SYMBOL_CHARS:
                unread()
                break
            buffer += char
            if buffer in _KEYWORDS:
                best = (_KEYWORDS[buffer], buffer)
            elif best is not None:
                unread()
                break
        if best is None:
            return _Tok.ERROR, f"error expected: keyword found '{buffer}'"
        return best

    def word() -> tuple[_Tok, str]:
        buffer: list[str] = []
        while True:
            char = read()
            if char == _END:
                break
            if char in _SYMBOL_CHARS or char in _BLANKS:
                unread()
                break
            buffer.append(char)
        literal = "".join(buffer)
        return _KEYWORDS.get(literal, _Tok.IDENTIFIER), literal

    tokens: list[tuple[_Tok, str]] = []
    while True:
        char = read()
        while char in _BLANKS:
            char = read()
        if char == _END:
            tokens.append((_Tok.END, ""))
            return tokens
        unread()
        tokens.append(symbol() if char in _SYMBOL_CHARS else word())


class _LabelParser:
    """Recursive descent over the token list, with upstream's error texts.

    In a value position (``values=True``) the keywords ``in`` / ``notin`` are plain
    identifiers, so ``k in (in)`` and ``in=notin`` parse as upstream's do.
    """

    def __init__(self, text: str) -> None:
        self._tokens = _tokenize(text)
        self._pos = 0

    def _peek(self, *, values: bool = True) -> tuple[_Tok, str]:
        tok, literal = self._tokens[min(self._pos, len(self._tokens) - 1)]
        if values and tok in (_Tok.IN, _Tok.NOT_IN):
            tok = _Tok.IDENTIFIER
        return tok, literal

    def _next(self, *, values: bool = True) -> tuple[_Tok, str]:
        token = self._peek(values=values)
        self._pos += 1
        return token

    def parse(self) -> list[LabelRequirement]:
        requirements: list[LabelRequirement] = []
        while True:
            tok, literal = self._peek()
            if tok == _Tok.END:
                return requirements
            if tok not in (_Tok.IDENTIFIER, _Tok.NOT):
                raise SelectorError(
                    f"found '{literal}', expected: !, identifier, or 'end of string'"
                )
            try:
                requirements.append(self._requirement())
            except SelectorError as error:
                raise SelectorError(f"unable to parse requirement: {error.message}") from None
            tok, literal = self._next()
            if tok == _Tok.END:
                return requirements
            if tok != _Tok.COMMA:
                raise SelectorError(f"found '{literal}', expected: ',' or 'end of string'")
            tok, literal = self._peek()
            if tok not in (_Tok.IDENTIFIER, _Tok.NOT):
                raise SelectorError(f"found '{literal}', expected: identifier after ','")

    def _requirement(self) -> LabelRequirement:
        negated = False
        tok, key = self._next()
        if tok == _Tok.NOT:
            negated = True
            tok, key = self._next()
        if tok != _Tok.IDENTIFIER:
            raise SelectorError(f"found '{key}', expected: identifier")
        problems = is_qualified_name(key)
        if problems:
            # upstream validates the key with a nil field path, printed "<nil>"
            raise SelectorError(str(invalid("<nil>", key, "; ".join(problems))))
        operator: LabelOperator
        values: list[str] = []
        if negated:
            operator = "!"
        elif self._peek()[0] in (_Tok.END, _Tok.COMMA):
            operator = "exists"
        else:
            operator = self._operator()
            values = self._value_set() if operator in _SET_OPERATORS else self._exact_value()
        requirement, errors = _new_requirement(key, operator, values)
        if errors:
            raise SelectorError(aggregate_message(errors))
        return requirement

    def _operator(self) -> LabelOperator:
        tok, literal = self._next(values=False)
        operators: dict[_Tok, LabelOperator] = {
            _Tok.IN: "in",
            _Tok.EQUALS: "=",
            _Tok.DOUBLE_EQUALS: "==",
            _Tok.GREATER: "gt",
            _Tok.LESS: "lt",
            _Tok.NOT_IN: "notin",
            _Tok.NOT_EQUALS: "!=",
        }
        if tok not in operators:
            raise SelectorError(f"found '{literal}', expected: {_BINARY_OPERATOR_LIST}")
        return operators[tok]

    def _value_set(self) -> list[str]:
        tok, literal = self._next()
        if tok != _Tok.OPEN_PAREN:
            raise SelectorError(f"found '{literal}' expected: '('")
        tok, literal = self._peek()
        if tok == _Tok.CLOSE_PAREN:
            self._next()
            return [""]
        if tok not in (_Tok.IDENTIFIER, _Tok.COMMA):
            raise SelectorError(f"found '{literal}', expected: ',', ')' or identifier")
        found: set[str] = set()
        while True:
            tok, literal = self._next()
            if tok == _Tok.IDENTIFIER:
                found.add(literal)
                after, after_literal = self._peek()
                if after == _Tok.CLOSE_PAREN:
                    break
                if after != _Tok.COMMA:
                    raise SelectorError(f"found '{after_literal}', expected: ',' or ')'")
            elif tok == _Tok.COMMA:
                # a comma with nothing before it, after it, or beside another one
                # stands for an empty value
                if not found:
                    found.add("")
                after = self._peek()[0]
                if after == _Tok.CLOSE_PAREN:
                    found.add("")
                    break
                if after == _Tok.COMMA:
                    self._next()
                    found.add("")
            else:
                raise SelectorError(f"found '{literal}', expected: ',', or identifier")
        self._next()  # the closing parenthesis
        return sorted(found)

    def _exact_value(self) -> list[str]:
        if self._peek()[0] in (_Tok.END, _Tok.COMMA):
            return [""]
        tok, literal = self._next()
        if tok != _Tok.IDENTIFIER:
            raise SelectorError(f"found '{literal}', expected: identifier")
        return [literal]


def parse_label_selector(text: str) -> LabelSelector:
    """Parse a ``labelSelector`` query value; ``""`` selects everything.

    Raises :class:`SelectorError` with the message the apiserver returns.
    """
    requirements = _LabelParser(text).parse()
    requirements.sort(key=lambda requirement: requirement.key)
    return LabelSelector(tuple(requirements))


_OBJECT_OPERATORS: Final[dict[str, LabelOperator]] = {
    "In": "in",
    "NotIn": "notin",
    "Exists": "exists",
    "DoesNotExist": "!",
}


def _string_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise SelectorError(f"{what} must be a list of strings")
    return list(value)


def label_selector_from_object(obj: Mapping[str, Any] | None) -> LabelSelector:
    """Convert a ``metav1.LabelSelector`` object (``matchLabels`` / ``matchExpressions``).

    ``None`` selects nothing and ``{}`` everything, as ``LabelSelectorAsSelector``
    decides.  Raises :class:`SelectorError` with upstream's message for a bad one.
    """
    if obj is None:
        return LabelSelector.nothing()
    match_labels = obj.get("matchLabels") or {}
    expressions = obj.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in match_labels.items()
    ):
        raise SelectorError("matchLabels must be a mapping of strings to strings")
    if not isinstance(expressions, list | tuple):
        raise SelectorError("matchExpressions must be a list")
    requirements: list[LabelRequirement] = []
    for key, value in sorted(match_labels.items()):
        requirement, errors = _new_requirement(key, "=", [value])
        if errors:
            raise SelectorError(aggregate_message(errors))
        requirements.append(requirement)
    for expression in expressions:
        if not isinstance(expression, Mapping):
            raise SelectorError("matchExpressions items must be objects")
        key = expression.get("key") or ""
        operator_name = expression.get("operator") or ""
        if not isinstance(key, str) or not isinstance(operator_name, str):
            raise SelectorError("matchExpressions key and operator must be strings")
        operator = _OBJECT_OPERATORS.get(operator_name)
        if operator is None:
            raise SelectorError(f"{go_quote(operator_name)} is not a valid label selector operator")
        raw_values = expression.get("values")
        # Go copies the values into a nil slice, so an empty list is printed as null
        values = _string_list(raw_values, "matchExpressions values") if raw_values else None
        requirement, errors = _new_requirement(key, operator, values)
        if errors:
            raise SelectorError(aggregate_message(errors))
        requirements.append(requirement)
    requirements.sort(key=lambda requirement: requirement.key)
    return LabelSelector(tuple(requirements))


# ===== field selectors =======================================================================


@dataclass(frozen=True)
class FieldRequirement:
    """One ``field=value`` (``==`` is the same) or ``field!=value`` term."""

    field: str
    op: Literal["=", "!="]
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        """Whether ``fields`` satisfy the term; an absent field counts as ``""``."""
        equal = fields.get(self.field, "") == self.value
        return equal if self.op == "=" else not equal

    def __str__(self) -> str:
        return f"{self.field}{self.op}{_escape_field_value(self.value)}"


@dataclass(frozen=True)
class FieldSelector:
    """A parsed field selector: all terms must hold.  ``FieldSelector()`` selects everything."""

    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        """True when the selector does not restrict anything."""
        return not self.requirements

    def matches(self, fields: Mapping[str, str]) -> bool:
        """Whether an object whose selectable fields are ``fields`` is selected."""
        return all(requirement.matches(fields) for requirement in self.requirements)

    def fields(self) -> frozenset[str]:
        """The field names the selector uses (for "field label not supported" checks)."""
        return frozenset(requirement.field for requirement in self.requirements)

    def requires_exact_match(self, field_name: str) -> str | None:
        """The value ``field_name`` must equal when an ``=`` term pins it, else ``None``."""
        for requirement in self.requirements:
            if requirement.field == field_name and requirement.op == "=":
                return requirement.value
        return None

    def __str__(self) -> str:
        return ",".join(str(requirement) for requirement in self.requirements)


def _escape_field_value(value: str) -> str:
    """``fields.EscapeValue``: backslash-escape ``\\``, ``,`` and ``=``."""
    return "".join("\\" + char if char in "\\,=" else char for char in value)


def _unescape_field_value(value: str) -> str:
    r"""``fields.UnescapeValue``: only ``\\``, ``\,`` and ``\=`` are escapes."""
    out: list[str] = []
    escaped = False
    for char in value:
        if escaped:
            if char not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{char}")
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ",=":
            # upstream formats the rune with %v, which prints its code point number
            raise SelectorError(
                f"invalid field selector: unescaped character in value: {ord(char)}"
            )
        else:
            out.append(char)
    if escaped:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _split_field_terms(text: str) -> Iterable[str]:
    """Split at commas that are not backslash-escaped, keeping the escapes."""
    start = 0
    escaped = False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ",":
            yield text[start:index]
            start = index + 1
    yield text[start:]


def _split_field_term(term: str) -> tuple[str, Literal["=", "!="], str] | None:
    """Split a term at its first operator; ``!=`` and ``==`` win over ``=``."""
    for index in range(len(term)):
        rest = term[index:]
        if rest.startswith("!="):
            return term[:index], "!=", rest[2:]
        if rest.startswith("=="):
            return term[:index], "=", rest[2:]
        if rest.startswith("="):
            return term[:index], "=", rest[1:]
    return None


def parse_field_selector(text: str) -> FieldSelector:
    """Parse a ``fieldSelector`` query value; ``""`` selects everything.

    Terms come back sorted by their text, as upstream sorts them.  A term with
    neither a field nor a value (``=``) is dropped, as upstream drops it.
    Raises :class:`SelectorError` with the message the apiserver returns.
    """
    requirements: list[FieldRequirement] = []
    for term in sorted(_split_field_terms(text)) if text else ():
        if not term:
            continue
        split = _split_field_term(term)
        if split is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        name, op, raw_value = split
        value = _unescape_field_value(raw_value)
        if name or value:
            requirements.append(FieldRequirement(name, op, value))
    return FieldSelector(tuple(requirements))
