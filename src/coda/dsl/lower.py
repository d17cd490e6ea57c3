"""AST -> IR: resolve names, check calls, and collect the program's outputs.

Scoping rules (docs/dsl.md has the user's version):
- `input` (alias `acc`) is the GEMM result; a local is any name assigned by a statement.
- A name that no statement assigns is an operand. With a parameter list in the header, every
  operand must be declared there; without one, free names are operands of inferred kind.
- Reading a local before its first assignment is an error, except `output`: before it is
  assigned, `output` is the prior contents of `out=` (so `output += x;` accumulates).
- `save NAME = e;` writes a tile output and binds NAME; `NAME = row_sum(e);` (or another
  reduction) writes a reduction output, which the program cannot read back.
- A local that is neither an output nor read afterwards is an error: it is either dead code or a
  value the user meant to keep and forgot to `save`.
"""

from __future__ import annotations

import difflib

from ..errors import DslError, Loc
from ..ir import Epilogue, Node, Output, Param
from ..primitives import INPUT_NAMES, PRIMITIVES, unknown_function_hint
from . import parser as ast


def lower(program: ast.Program, source: str | None = None) -> Epilogue:
    """Turn a parsed program into an Epilogue; DslErrors are rendered against `source`."""
    try:
        return _Lowering(program).run().replace(source=source)
    except DslError as err:
        raise (err.with_source(source) if source else err) from None


class _Lowering:
    def __init__(self, program: ast.Program):
        self.program = program
        self.declared_only = program.params is not None
        self.params: dict[str, Param] = {}
        for decl in program.params or ():
            if decl.name in self.params:
                raise DslError(f"parameter {decl.name!r} is declared twice", decl.loc)
            check_name(decl.name, decl.loc, "a parameter")
            self.params[decl.name] = Param(decl.name, decl.kind, decl.loc)
        self.assigned = {t.name for s in program.body for t in s.targets}
        self.env: dict[str, Node] = {}
        self.outputs: list[Output] = []
        self.reductions: dict[str, str] = {}
        self.unread: dict[str, Loc | None] = {}   # local -> where its latest value was assigned

    def run(self) -> Epilogue:
        for stmt in self.program.body:
            self.statement(stmt)
        if "output" not in self.env:
            close = difflib.get_close_matches("output", self.env, n=1)
            hint = f" (it assigns {close[0]!r}: did you mean `output`?)" if close else ""
            if not close and self.reductions:   # a program of reductions alone
                hint = (" (to compute only reductions, write `output = input;` and launch with "
                        f"outputs={list(self.reductions)!r}: the tile is then never stored)")
            raise DslError(f"the program never assigns `output`{hint}", self.program.end)
        if self.unread:
            name, loc = next(iter(self.unread.items()))
            raise unread_error(name, loc, "", self.saved(name))
        main = Output("output", self.env["output"], None, self.program.loc)
        return Epilogue(self.program.name or "epilogue", self.params, (main, *self.outputs))

    # statements -------------------------------------------------------------------------------
    def statement(self, stmt: ast.Assign) -> None:
        value = stmt.value
        is_call = isinstance(value, ast.Call)
        form = PRIMITIVES[value.func].form if is_call and value.func in PRIMITIVES else None
        if len(stmt.targets) == 2:
            if form != "unpack":
                raise DslError("only `unpack(...)` gives two values", stmt.targets[1].loc)
            first, second = stmt.targets
            if first.name == second.name:
                raise DslError(f"both halves of the pair are named {first.name!r}, so the first "
                               f"would be lost: give them two names, as in `gate, up = unpack(...);`",
                               second.loc)
            pair = self.expr(value.args[0]) if self.arity_ok(value) else None
            for index, target in enumerate(stmt.targets):
                self.bind(target, Node("unpack", (pair,), index, value.loc), kept=True)
            return
        target = stmt.targets[0]
        if form == "unpack":
            raise DslError(f"unpack gives two values: write `gate, up = unpack(...);`, not "
                           f"`{target.name} = unpack(...);`", value.loc)
        if form == "reduction":
            if stmt.op != "=":
                raise DslError(f"a reduction is an output: write `{target.name} = "
                               f"{value.func}(...);`", stmt.loc)
            self.arity_ok(value)
            if target.name == "output":
                raise DslError(f"`output` is a tile; give the {value.func} output its own name, "
                               f"as in `s = {value.func}(...);`", target.loc)
            self.declare_output(target)
            reduced = self.expr(value.args[0])
            self.reductions[target.name] = value.func
            self.outputs.append(Output(target.name, reduced, value.func, stmt.loc))
            return
        node = self.expr(value)
        if stmt.op == "+=":
            node = Node("add", (self.read(target), node), None, stmt.loc)
        if stmt.op == "save":
            self.declare_output(target)
            self.outputs.append(Output(target.name, node, None, stmt.loc))
        self.bind(target, node, kept=stmt.op == "save" or target.name == "output")

    def saved(self, name: str) -> bool:
        return any(o.name == name for o in self.outputs)

    def declare_output(self, target: ast.Name) -> None:
        if target.name == "output":
            raise DslError("`output` is the primary output: assign it as `output = ...;`, without "
                           "`save`", target.loc)
        if any(o.name == target.name for o in self.outputs):
            raise DslError(f"output {target.name!r} is written twice", target.loc)
        if target.name in self.env:
            raise DslError(f"{target.name!r} already names a value; an output needs a new name",
                           target.loc)
        check_name(target.name, target.loc, "an output")
        if target.name in self.params:
            raise DslError(f"cannot assign to operand {target.name!r}", target.loc)

    def bind(self, target: ast.Name, node: Node, kept: bool) -> None:
        """Bind a local; one that is not `kept` (an output) must be read before the program ends
        or the name is assigned again."""
        name = target.name
        if name in self.unread:
            raise unread_error(name, self.unread[name], " before it is assigned again", self.saved(name))
        check_name(name, target.loc, "a value")
        if name in self.params:
            raise DslError(f"cannot assign to operand {name!r}", target.loc)
        if name in self.reductions:
            raise DslError(f"{name!r} is the reduction output {self.reductions[name]}(...); "
                           f"it cannot be reassigned", target.loc)
        self.env[name] = node
        if not kept:
            self.unread[name] = target.loc

    # expressions ------------------------------------------------------------------------------
    def expr(self, e) -> Node:
        """The IR of an expression, built from a stack rather than by recursion: a chain `a + b +
        c + ...` is a tree as deep as it is long. Calls are checked before their arguments are
        read, and arguments read left to right, as a recursive walk would."""
        built: list[Node] = []
        todo: list[tuple[object, bool]] = [(e, False)]
        while todo:
            e, args_built = todo.pop()
            if isinstance(e, ast.Num):
                built.append(Node("const", (), e.value, e.loc))
            elif isinstance(e, ast.Name):
                built.append(self.read(e))
            elif not args_built:
                self.check_call(e)
                todo.append((e, True))
                todo.extend((a, False) for a in reversed(e.args))
            else:
                first = len(built) - len(e.args)
                args = tuple(built[first:])
                del built[first:]
                built.append(self.call(e, args))
        return built[0]

    def read(self, e: ast.Name) -> Node:
        name = e.name
        if name in self.reductions:
            raise DslError(f"{name!r} is a reduction result ({self.reductions[name]}); it is "
                           f"complete only when the kernel ends, so the epilogue cannot read it",
                           e.loc)
        if name in self.env:
            self.unread.pop(name, None)
            return self.env[name]
        if name in INPUT_NAMES:
            return Node("input", (), None, e.loc)
        if name == "output":
            return Node("prior", (), None, e.loc)
        if name in PRIMITIVES:
            raise DslError(f"{name!r} is a function; call it as {name}(...)", e.loc)
        if name in self.params and self.params[name].declared:
            return Node("operand", (), name, e.loc)
        if name in self.assigned:
            raise DslError(f"{name!r} is read before it is assigned", e.loc)
        if name not in self.params:
            if name in FOREIGN_CONSTANTS:   # an operand so named would be a surprise at launch
                raise DslError(f"there is no constant {name!r}: {FOREIGN_CONSTANTS[name]}", e.loc)
            if self.declared_only:
                raise DslError(f"unknown name {name!r}: not `input`, a local value or a "
                               f"declared parameter", e.loc)
            check_name(name, e.loc, "an operand")
            self.params[name] = Param(name, None, e.loc, declared=False)
        return Node("operand", (), name, e.loc)

    def check_call(self, e: ast.Call) -> None:
        """What a call must be before its arguments are looked at: a known element-wise function
        with its number of arguments."""
        prim = PRIMITIVES.get(e.func)
        if prim is None:
            raise DslError(f"unknown function {e.func!r}{unknown_function_hint(e.func)}", e.loc)
        if prim.form == "reduction":
            raise DslError(f"{e.func}(...) is an output: it must be the whole right-hand side of "
                           f"an assignment, as in `s = {e.func}(...);`", e.loc)
        if prim.form == "unpack":
            raise DslError("unpack(...) must be the whole right-hand side of "
                           "`gate, up = unpack(...);`", e.loc)
        self.arity_ok(e)

    def call(self, e: ast.Call, args: tuple[Node, ...]) -> Node:
        """The call's node from its arguments' (`check_call` passed)."""
        if PRIMITIVES[e.func].form == "rope":
            for table, node in zip(e.args[1:], args[1:], strict=True):
                if node.op != "operand":
                    raise DslError("rope's cos and sin must be operands (kind `head`)",
                                   getattr(table, "loc", e.loc))
        return Node(e.func, args, None, e.loc)

    def arity_ok(self, e: ast.Call) -> bool:
        arity = PRIMITIVES[e.func].arity
        if len(e.args) != arity:
            plural = "s" if arity != 1 else ""
            raise DslError(f"{e.func} takes {arity} argument{plural}, got {len(e.args)}", e.loc)
        return True


#: Other languages' constants, which would otherwise be free operands (`-inf` asking for an
#: operand `inf` at launch); a program that declares such a parameter still has it.
_INFINITY = "write 1e400 (a number beyond float64's range is infinity), or a large finite one"
FOREIGN_CONSTANTS = {
    "inf": _INFINITY, "Inf": _INFINITY, "INF": _INFINITY,
    "infinity": _INFINITY, "INFINITY": _INFINITY, "Infinity": _INFINITY,
    "nan": "a NaN is 0.0 / 0.0", "NaN": "a NaN is 0.0 / 0.0", "NAN": "a NaN is 0.0 / 0.0",
    "True": "comparisons give 1.0 or 0.0; write 1.0", "true": "comparisons give 1.0 or 0.0; write 1.0",
    "False": "comparisons give 1.0 or 0.0; write 0.0", "false": "comparisons give 1.0 or 0.0; write 0.0",
    "None": "every value is a number",
}


def unread_error(name: str, loc: Loc | None, when: str, saved: bool) -> DslError:
    """A local's value that nothing reads; after `save NAME = ...;` (`saved`) the output NAME
    keeps the earlier value, and a second output needs a name of its own."""
    if saved:
        return DslError(f"{name!r} is assigned but never read{when}; the output {name!r} keeps the "
                        f"value saved earlier, so `save` this one under a new name to keep it as "
                        f"another tile output, or remove it", loc)
    return DslError(f"{name!r} is assigned but never read{when}, and it is not an output: write "
                    f"`save {name} = ...;` to keep it as a tile output, or remove it", loc)


def check_name(name: str, loc: Loc | None, what: str) -> None:
    """Refuse a reserved name (the GEMM result's, a primitive's, a keyword) for a parameter, a
    value or an output: the text DSL's rule, and the tracer's for a function's operands."""
    if name in INPUT_NAMES:
        raise DslError(f"{name!r} is the GEMM result; it cannot be used as {what} name", loc)
    if name in PRIMITIVES or name in ("save", "EPILOGUE"):
        raise DslError(f"{name!r} is reserved; it cannot be used as {what} name", loc)
