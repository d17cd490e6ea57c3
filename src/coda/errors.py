"""Every error CODA raises for bad input is a `CodaError`.

DSL errors carry a source location and render a caret excerpt; launch errors name the operand and
what was expected, so a user never has to read a Triton or PyTorch stack trace to fix their call.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

#: Where a line of DSL text ends, for the lexer's locations and an error's quoted line alike.
LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Loc:
    """A position in DSL text (1-based line and column) or, with its file, in the Python source
    of a traced epilogue function."""

    line: int
    col: int
    file: str | None = None

    def __str__(self) -> str:
        where = f"line {self.line}, column {self.col}"
        return f"{self.file}, {where}" if self.file else where


class CodaError(Exception):
    """Base class of every error CODA raises on purpose."""


class DslError(CodaError):
    """A bad epilogue program: syntax, unknown function, wrong arity, undefined name, ...

    `str(err)` names the line and column and, when the source text is known, shows the line with a
    caret under the offending column.
    """

    def __init__(self, message: str, loc: Loc | None = None, source: str | None = None):
        self.message = message
        self.loc = loc
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        if self.loc is None:
            return self.message
        text = f"{self.loc}: {self.message}"
        lines = LINE_END.split(self.source) if self.source else []
        if 1 <= self.loc.line <= len(lines):
            line = lines[self.loc.line - 1]
            indent = "".join(c if c == "\t" else " " for c in line[:self.loc.col - 1])  # tabs stay tabs
            text += f"\n    {line}\n    {indent}^"
        return text

    def with_source(self, source: str) -> DslError:
        """The same error, rendered against `source` (the parser attaches its text this way)."""
        return self.located(self.loc, source)

    def located(self, loc: Loc | None, source: str | None) -> DslError:
        """A copy of this error (of its own class) at `loc`, quoting `source`."""
        err = copy.copy(self)
        err.loc, err.source = loc, source
        err.args = (err._render(),)
        return err


class UnknownNameError(DslError, AttributeError):
    """`coda.NAME` where coda has no NAME (`coda.sum` in an epilogue function): a DslError that
    says what to write instead, and the AttributeError that `hasattr` and `getattr(coda, name,
    default)` expect of a missing attribute."""


class LaunchError(CodaError):
    """A launch with operands of the wrong shape, dtype, device or kind, or bad options."""
