"""Tokens of the epilogue DSL, each with its line and column."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import LINE_END, DslError, Loc


@dataclass(frozen=True)
class Token:
    kind: str  # "num", "name", "op" or "end"
    text: str
    loc: Loc


_TOKEN = re.compile(
    rf"""(?P<space>[ \t\f\v]+)
      | (?P<newline>{LINE_END.pattern})
      | (?P<comment>(\#|//)[^\r\n]*)
      | (?P<num>(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)
      | (?P<name>[A-Za-z_][A-Za-z_0-9]*)
      | (?P<op>\+=|<=|>=|==|!=|[-+*/(){{}},;:=<>])""",
    re.VERBOSE,
)


#: What a character the DSL does not have usually meant, and how to write it.
_FOREIGN_CHARACTERS = {
    "^": "there is no power operator: write x * x or square(x)",
    "?": "there is no conditional expression: write where(c, a, b)",
    "&": "there are no logical operators: comparisons give 1.0 or 0.0, so `a and b` is (a) * (b)",
    "|": "there are no logical operators: comparisons give 1.0 or 0.0, so `a or b` is max(a, b)",
    "!": "there is no `not`: comparisons give 1.0 or 0.0, so `not c` is 1.0 - (c)",
    "%": "there is no modulo",
    "[": "there is no indexing: operands are whole tiles, rows, columns or scalars, bound by name "
         "at launch",
}


def tokenize(source: str) -> list[Token]:
    """Split `source` into tokens; raise DslError at the first character that starts none."""
    tokens: list[Token] = []
    line, line_start, pos = 1, 0, 0
    while pos < len(source):
        match = _TOKEN.match(source, pos)
        loc = Loc(line, pos - line_start + 1)
        if match is None:
            char = source[pos]
            hint = f": {_FOREIGN_CHARACTERS[char]}" if char in _FOREIGN_CHARACTERS else ""
            raise DslError(f"unexpected character {char!r}{hint}", loc, source)
        kind = match.lastgroup
        if kind == "newline":
            line, line_start = line + 1, match.end()
        elif kind in ("num", "name", "op"):
            tokens.append(Token(kind, match.group(), loc))
        pos = match.end()
    tokens.append(Token("end", "", Loc(line, pos - line_start + 1)))
    return tokens
