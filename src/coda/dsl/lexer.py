"""Tokens of the epilogue DSL, each with its line and column."""

from __future__ import annotations

import re
import unicodedata
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
      | (?P<num>([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)
      | (?P<name>[A-Za-z_][A-Za-z_0-9]*)
      | (?P<op>\+=|<=|>=|==|!=|[-+*/(){{}},;:=<>])""",
    re.VERBOSE,
)


#: What a character the DSL does not have usually meant, and how to write it.
FOREIGN_CHARACTERS = {
    "^": "there is no power operator: write x * x or square(x)",
    "?": "there is no conditional expression: write where(c, a, b)",
    "&": "there are no logical operators: comparisons give 1.0 or 0.0, so `a and b` is (a) * (b)",
    "|": "there are no logical operators: comparisons give 1.0 or 0.0, so `a or b` is max(a, b)",
    "!": "there is no `not`: comparisons give 1.0 or 0.0, so `not c` is 1.0 - (c)",
    "%": "there is no modulo",
    "[": "there is no indexing: operands are whole tiles, rows, columns or scalars, bound by name "
         "at launch",
    ".": "there are no modules or methods: call a function by its own name, as in exp(x) (not "
         "torch.exp(x), np.exp(x) or x.exp())",
    "'": "there are no strings; for infinity, float('inf'), write 1e400 (a number beyond "
         "float64's range)",
}
# the other quotation marks, a word processor's among them
FOREIGN_CHARACTERS.update(dict.fromkeys("\"\u201c\u201d\u2018\u2019", FOREIGN_CHARACTERS["'"]))
#: Characters that typeset mathematics, word processors and generated text put where an ASCII
#: operator belongs, and that a reader of the message could not tell apart from it.
_LOOKALIKES = {"\u2212": "-", "\u2013": "-", "\u2014": "-", "\u00d7": "*", "\u00b7": "*",
               "\u22c5": "*", "\u2217": "*", "\u00f7": "/", "\u2215": "/", "\u2264": "<=",
               "\u2265": ">=", "\u2260": "!=", "\uff1b": ";", "\uff0c": ",", "\uff08": "(",
               "\uff09": ")"}


def _character_hint(char: str) -> str:
    """What to say after "unexpected character": what the DSL has instead, for a character
    another language uses or one that only looks like ASCII (a Unicode minus, a no-break space)."""
    if char in FOREIGN_CHARACTERS:
        return f": {FOREIGN_CHARACTERS[char]}"
    name = unicodedata.name(char, f"U+{ord(char):04X}")
    if char in _LOOKALIKES:
        return f" ({name}): write the ASCII {_LOOKALIKES[char]!r} it looks like"
    if char.isspace() or unicodedata.category(char) == "Cf":
        return f" ({name}): write a plain space, or nothing"
    return ""


def tokenize(source: str) -> list[Token]:
    """Split `source` into tokens; raise DslError at the first character that starts none."""
    tokens: list[Token] = []
    line, line_start, pos = 1, 0, 0
    if source.startswith("\ufeff"):   # the byte-order mark of a file saved as "UTF-8 with BOM"
        line_start = pos = 1
    while pos < len(source):
        match = _TOKEN.match(source, pos)
        loc = Loc(line, pos - line_start + 1)
        if match is None:
            char = source[pos]
            raise DslError(f"unexpected character {char!r}{_character_hint(char)}", loc, source)
        kind = match.lastgroup
        if kind == "num" and source[match.end():match.end() + 1].isidentifier():
            # `1e-5f`, `0x10`, `1_000`, `2x`: C's, Python's and algebra's spellings, which would
            # otherwise read as a number and a name, and fail as a missing operator after them
            raise DslError(f"unexpected {source[match.end()]!r} after the number {match.group()}: "
                           f"numbers are plain decimals (every one is a float), with no suffix, "
                           f"base or digit separator, and a product needs its `*`",
                           Loc(line, match.end() - line_start + 1), source)
        if kind == "op" and source.startswith("/*", pos):
            raise DslError("there are no block comments: a comment runs from # or // to the end "
                           "of its line", loc, source)
        if kind == "newline":
            line, line_start = line + 1, match.end()
        elif kind in ("num", "name", "op"):
            tokens.append(Token(kind, match.group(), loc))
        pos = match.end()
    tokens.append(Token("end", "", Loc(line, pos - line_start + 1)))
    return tokens
