"""The gcfg ("git config") INI dialect the Go cloud providers read their cloud-config in
(gopkg.in/gcfg.v1), as far as trio-ccm's readers share it: logical lines (a trailing
backslash continues a line outside quotes), values (up to an unquoted `;` or `#`, trimmed,
double quotes removed, escapes `\\\\`, `\\"`, `\\n`, `\\t` applied) and gcfg's bool words.
Each provider's config module reads its own sections and keys on top of this.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from trio_ccm.errors import ConfigError

__all__ = ["BOOLS", "Line", "assignment", "logical_lines", "value"]

BOOLS: Final = {
    "true": True,
    "yes": True,
    "on": True,
    "1": True,
    "false": False,
    "no": False,
    "off": False,
    "0": False,
}

_KEY: Final = re.compile(r"^[A-Za-z][A-Za-z0-9-]*$")


@dataclass(frozen=True, slots=True)
class Line:
    number: int
    text: str


def logical_lines(text: str) -> Iterator[Line]:
    """Lines with backslash continuations joined (outside quotes), numbered by their start."""
    lines = text.replace("\r\n", "\n").split("\n")
    index = 0
    while index < len(lines):
        start = index
        current = lines[index]
        index += 1
        while _continues(current) and index < len(lines):
            current = current[:-1] + lines[index]
            index += 1
        yield Line(start + 1, current)


def _continues(line: str) -> bool:
    """Whether `line` ends in an unquoted, unescaped backslash (gcfg's continuation)."""
    in_quote = escaped = False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
            continue
        if ch == "\\":
            if i == len(line) - 1 and not in_quote:
                return True
            escaped = True
        elif ch == '"':
            in_quote = not in_quote
        elif ch in ";#" and not in_quote:
            return False
    return False


def value(raw: str, where: str) -> str:
    """gcfg's value: up to an unquoted ; or #, trimmed, quotes removed, escapes applied."""
    out: list[str] = []
    in_quote = False
    end = 0  # length of `out` up to the last significant character
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\":
            if i + 1 >= len(raw):
                raise ConfigError(f"{where}: a backslash ends the value; remove it or quote it")
            nxt = raw[i + 1]
            escaped = {"\\": "\\", '"': '"', "n": "\n", "t": "\t"}.get(nxt)
            if escaped is None or (not in_quote and nxt not in '"'):
                raise ConfigError(
                    f'{where}: invalid escape \\{nxt}; inside quotes use \\\\, \\", \\n or \\t'
                )
            out.append(escaped)
            end = len(out)
            i += 2
            continue
        if ch == '"':
            in_quote = not in_quote
            end = len(out)
            i += 1
            continue
        if not in_quote and ch in ";#":
            break
        out.append(ch)
        if in_quote or ch not in " \t":
            end = len(out)
        i += 1
    if in_quote:
        raise ConfigError(f'{where}: a double quote is not closed; add the closing "')
    return "".join(out[:end]).lstrip(" \t")


def assignment(text: str, where: str) -> tuple[str, bool, str]:
    """A `key = value` line (or a bare `key`, gcfg's blank bool): the key, whether `=`
    was there, and the raw text after it; ConfigError naming `where` for anything else."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep:
        name = name.split(";", 1)[0].split("#", 1)[0].strip()
    if not _KEY.match(name):
        raise ConfigError(f"{where}: {text!r} is neither a section header nor key = value")
    return name, bool(sep), raw
