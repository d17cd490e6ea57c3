"""Text DSL -> AST, by recursive descent. Every AST node carries its line and column.

    program := header? "{" stmt* "}" | stmt*
    header  := "EPILOGUE" NAME? ("(" [param ("," param)*] ")")?
    param   := NAME (":" KIND)?
    stmt    := "save" NAME "=" expr ";" | NAME "," NAME "=" expr ";"
             | NAME "=" expr ";"        | NAME "+=" expr ";"
    expr    := sum (("<" | "<=" | ">" | ">=" | "==" | "!=") sum)?
    sum     := product (("+" | "-") product)*
    product := unary (("*" | "/") unary)*
    unary   := ("-" | "+") unary | NUMBER | NAME | NAME "(" [expr ("," expr)*] ")" | "(" expr ")"
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DslError, Loc
from ..primitives import KINDS
from .lexer import FOREIGN_CHARACTERS, Token, tokenize


@dataclass(frozen=True)
class Num:
    value: float
    loc: Loc


@dataclass(frozen=True)
class Name:
    name: str
    loc: Loc


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple
    loc: Loc


@dataclass(frozen=True)
class Assign:
    """`targets = value;` (two targets for unpack); `op` is "=", "+=" or "save"."""

    targets: tuple[Name, ...]
    op: str
    value: object
    loc: Loc


@dataclass(frozen=True)
class ParamDecl:
    name: str
    kind: str | None
    loc: Loc


@dataclass(frozen=True)
class Program:
    """`params` is None when the header has no parameter list (free names are then operands)."""

    name: str | None
    params: tuple[ParamDecl, ...] | None
    body: tuple[Assign, ...]
    end: Loc
    loc: Loc


_COMPARISONS = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
#: Words that start a statement in other languages, where the DSL has only assignments.
_CONTROL_FLOW = ("if", "else", "for", "while", "return")
_DECLARATIONS = ("let", "var", "val", "const", "auto", "float", "double", "int")
#: Python's words for what other languages spell with the characters the lexer explains.
_FOREIGN_WORDS = {"and": FOREIGN_CHARACTERS["&"], "or": FOREIGN_CHARACTERS["|"],
                  "not": FOREIGN_CHARACTERS["!"], "if": FOREIGN_CHARACTERS["?"],
                  "else": FOREIGN_CHARACTERS["?"]}


#: How deep parentheses, calls and signs may nest in one expression (statements may chain any
#: number of values: the compiler's passes do not recurse).
MAX_NESTING = 100


class _Parser:
    def __init__(self, source: str):
        self.tokens = tokenize(source)
        self.pos = 0
        self.depth = 0   # how many parentheses, calls and signs the expression is inside

    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def error(self, message: str, tok: Token | None = None) -> DslError:
        tok = tok or self.tok
        return DslError(message, tok.loc)

    def describe(self, tok: Token) -> str:
        return "the end of the program" if tok.kind == "end" else repr(tok.text)

    def accept(self, text: str) -> Token | None:
        if self.tok.text == text and self.tok.kind in ("op", "name"):
            self.pos += 1
            return self.tokens[self.pos - 1]
        return None

    def expect(self, text: str, what: str | None = None) -> Token:
        tok = self.accept(text)
        if tok is None:
            found = self.tok
            word = found.text if found.kind == "name" else ""
            hint = f": {_FOREIGN_WORDS[word]}" if word in _FOREIGN_WORDS else ""
            raise self.error(f"expected {what or repr(text)}, found {self.describe(found)}{hint}")
        return tok

    def name(self, what: str) -> Token:
        if self.tok.kind != "name":
            raise self.error(f"expected {what}, found {self.describe(self.tok)}")
        self.pos += 1
        return self.tokens[self.pos - 1]

    # program structure ---------------------------------------------------------------------
    def program(self) -> Program:
        start = self.tok.loc
        name, params = None, None
        if self.tok.kind == "name" and self.tok.text == "EPILOGUE":
            self.pos += 1
            if self.tok.kind == "name":
                name = self.name("a program name").text
            if self.accept("("):
                params = self.params()
            self.expect("{", "'{' to open the program body")
            body = self.statements(closing="}")
            end = self.expect("}", "'}' to close the program body").loc
        elif self.accept("{"):
            body = self.statements(closing="}")
            end = self.expect("}", "'}' to close the program body").loc
        else:
            body = self.statements(closing=None)
            end = self.tok.loc
        if self.tok.kind != "end":
            raise self.error(f"unexpected {self.describe(self.tok)} after the program")
        return Program(name, params, body, end, start)

    def params(self) -> tuple[ParamDecl, ...]:
        params: list[ParamDecl] = []
        if self.accept(")"):
            return ()
        while True:
            tok = self.name("a parameter name")
            kind = None
            if self.accept(":"):
                kind_tok = self.name("an operand kind")
                if kind_tok.text not in KINDS:
                    raise self.error(f"unknown operand kind {kind_tok.text!r} (expected one of "
                                     f"{', '.join(KINDS)})", kind_tok)
                kind = kind_tok.text
            params.append(ParamDecl(tok.text, kind, tok.loc))
            if self.accept(")"):
                return tuple(params)
            self.expect(",", "',' or ')' in the parameter list")

    def statements(self, closing: str | None) -> tuple[Assign, ...]:
        body: list[Assign] = []
        while self.tok.kind != "end" and not (closing and self.tok.text == closing):
            body.append(self.statement())
        return tuple(body)

    def statement(self) -> Assign:
        start = self.tok
        if start.kind == "name" and start.text == "save" and self.tokens[self.pos + 1].kind == "name":
            self.pos += 1
            target = self.name("a name to save")
            self.expect("=", "'=' after the saved name")
            return self.finish(Assign((Name(target.text, target.loc),), "save", self.expr(), start.loc))
        target = self.name("a statement (an assignment such as `output = ...;`)")
        targets = [Name(target.text, target.loc)]
        if self.accept(","):
            second = self.name("a second name to unpack into")
            targets.append(Name(second.text, second.loc))
        op_tok = self.tok
        if len(targets) == 1 and self.accept("+="):
            op = "+="
        elif self.accept("="):
            op = "="
        else:
            expected = "'='" if len(targets) == 2 else "'=' or '+='"
            then = op_tok if op_tok.kind == "end" else self.tokens[self.pos + 1]
            hint = _statement_hint(target.text, op_tok, then)
            raise self.error(f"expected {expected} after {targets[-1].name!r}, found "
                             f"{self.describe(op_tok)}{hint}", op_tok)
        return self.finish(Assign(tuple(targets), op, self.expr(), start.loc))

    def finish(self, stmt: Assign) -> Assign:
        self.expect(";", "';' to end the statement")
        return stmt

    # expressions ----------------------------------------------------------------------------
    def expr(self):
        left = self.sum()
        tok = self.tok
        if tok.kind == "op" and tok.text in _COMPARISONS:
            self.pos += 1
            right = self.sum()
            if self.tok.kind == "op" and self.tok.text in _COMPARISONS:
                raise self.error("comparisons cannot be chained; combine them with `*` or `where`")
            return Call(_COMPARISONS[tok.text], (left, right), tok.loc)
        return left

    def sum(self):
        left = self.product()
        while self.tok.text in ("+", "-") and self.tok.kind == "op":
            tok = self.tokens[self.pos]
            self.pos += 1
            left = Call("add" if tok.text == "+" else "sub", (left, self.product()), tok.loc)
        return left

    def product(self):
        left = self.unary()
        while self.tok.text in ("*", "/") and self.tok.kind == "op":
            tok = self.tokens[self.pos]
            self.pos += 1
            if tok.text == "*" and self.tok.text == "*":
                raise self.error("there is no power operator `**`: write x * x or square(x)", tok)
            left = Call("mul" if tok.text == "*" else "div", (left, self.unary()), tok.loc)
        return left

    def unary(self):
        """A signed, called or parenthesized term: the parser's recursion, held to MAX_NESTING
        levels so that a deeper expression is a located error, not Python's RecursionError."""
        if self.depth > MAX_NESTING:
            raise self.error(f"the expression nests more than {MAX_NESTING} levels deep here: "
                             f"name its inner parts in statements of their own")
        self.depth += 1
        try:
            return self.term()
        finally:
            self.depth -= 1

    def term(self):
        tok = self.tok
        if self.accept("-"):
            return Call("neg", (self.unary(),), tok.loc)
        if self.accept("+"):
            return self.unary()
        if tok.kind == "num":
            self.pos += 1
            return Num(float(tok.text), tok.loc)
        if tok.kind == "name":
            self.pos += 1
            if tok.text == "not" and (self.tok.kind in ("name", "num") or self.tok.text == "("):
                raise self.error(f"unexpected 'not': {_FOREIGN_WORDS['not']}", tok)
            if self.accept("("):
                return Call(tok.text, self.arguments(), tok.loc)
            return Name(tok.text, tok.loc)
        if self.accept("("):
            inner = self.expr()
            self.expect(")", "')' to close the parenthesis")
            return inner
        raise self.error(f"expected an expression, found {self.describe(tok)}")

    def arguments(self) -> tuple:
        if self.accept(")"):
            return ()
        args = [self.expr()]
        while self.accept(","):
            args.append(self.expr())
        if self.tok.text == "=" and isinstance(args[-1], Name):   # Python's `dropout(h, p=0.1)`
            raise self.error(f"arguments go by position, not by name: write the value alone, "
                             f"without `{args[-1].name}=`")
        self.expect(")", "',' or ')' in the argument list")
        return tuple(args)


def _statement_hint(first: str, after: Token, then: Token) -> str:
    """Why a statement that does not assign may have been written so: a word that starts other
    languages' statements (control flow, a declaration), a type annotation, or an assignment
    operator other than `+=` (`after` is the token after the first name, `then` the next)."""
    if after.text == ":":
        return f": values have no declared types; write `{first} = ...;`"
    if after.text in ("-", "*", "/") and then.text == "=":
        return f": the only compound assignment is `+=`; write `{first} = {first} {after.text} ...;`"
    if first == "return":
        return ": the DSL has no `return`; assign the result to `output` (`output = ...;`)"
    if first in ("epilogue", "Epilogue"):
        return ": a header starts with `EPILOGUE`, in capitals"
    if first == "def":
        return (": this is the text DSL, `EPILOGUE name(params) { ... }`; a Python function "
                "is an epilogue through the @coda.epilogue decorator")
    if first in _CONTROL_FLOW:
        return (f": the DSL has no `{first}`; every statement assigns a value, and where(c, a, b) "
                f"chooses between two")
    if first in _DECLARATIONS and after.kind == "name":
        return f": assignments need no `{first}`; write `{after.text} = ...;`"
    return ""


def parse(source: str) -> Program:
    """Parse DSL text into an AST; raise DslError (with a caret excerpt) if it is malformed."""
    try:
        return _Parser(source).program()
    except DslError as err:
        raise err.with_source(source) from None
