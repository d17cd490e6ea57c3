"""The code a user reads in the documentation works as written.

Every fenced block of README.md, docs/*.md (not the benchmark reports, which record measurements)
and examples/README.md is checked:

- DSL programs (`EPILOGUE name(...) { ... }` in a block without a language) compile; a program
  whose next block starts `line L, column C:` must fail with exactly that message; the programs
  docs/ops.md shows are the ones its ops build.
- Python blocks run in a fresh namespace, as a user runs them on a CPU: without the Triton
  interpreter, so `backend="auto"` is the reference (the kernels have tests of their own, and
  the interpreter would take tens of seconds at the documents' sizes). The code of an HTML
  comment `<!-- setup: ... -->` just before a block runs first: the tensors a fragment assumes.
  A block marked `<!-- not run: REASON -->` (a GPU, a download, Inductor's build) has only its
  imports and definitions run. In every block, each call of a name the namespace holds must bind
  to that callable's signature, so a renamed function or keyword fails even in code that does not
  run (a skipped block, a method body).
- `<!-- excerpt of PATH -->`: every line of the block is a line of that file.
- `coda ...` command lines in bash blocks parse with the CLI's own parser and name files that
  exist; the cheap ones (`explain`, and `check` / `run` at small shapes) run and exit 0.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import shlex
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

import coda
from coda import cli
from coda.runtime import program

ROOT = Path(__file__).resolve().parent.parent
REPORTS = {"benchmarks.md", "benchmarks-log.md", "performance.md"}   # measurements, not examples
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in REPORTS),
        ROOT / "src" / "coda" / "examples" / "README.md"]   # the README links it as examples/README.md

FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
NOTE = re.compile(r"<!--\s*(not run:|setup:|excerpt of)\s*(.*?)\s*-->", re.S)
HEADER = re.compile(r"\bEPILOGUE(\s+\w+)?\s*(\([^)]*\))?\s*\{")
ERROR = re.compile(r"line \d+, column \d+: ")
BIG_GEMM = 2**27   # multiply-adds above which a documented `coda check` / `coda run` is not run here


@dataclass
class Block:
    """One fenced block: where it opens, its language, its text and the notes just before it."""

    path: str
    line: int
    lang: str
    text: str
    notes: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


def parse(markdown: str, path: str) -> list[Block]:
    """The fenced blocks of a markdown text, each with the `<!-- ... -->` notes right above it."""
    blocks, notes, lines, i = [], {}, markdown.splitlines(), 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].lstrip().startswith("```"))
            text = textwrap.dedent("\n".join(lines[i + 1:end])) + "\n"
            blocks.append(Block(path, i + 1, fence.group(2), text, notes))
            notes, i = {}, end + 1
        elif lines[i].lstrip().startswith("<!--"):
            end = next(j for j in range(i, len(lines)) if "-->" in lines[j])
            note = NOTE.fullmatch("\n".join(lines[i:end + 1]).strip())
            if note:
                notes[note.group(1).rstrip(":")] = note.group(2)
            i = end + 1
        else:
            notes = {} if lines[i].strip() else notes
            i += 1
    return blocks


BLOCKS = [block for doc in DOCS for block in parse(doc.read_text(), str(doc.relative_to(ROOT)))]
PYTHON = [block for block in BLOCKS if block.lang == "python" and "excerpt of" not in block.notes]


def programs(text: str) -> list[str]:
    """Each `EPILOGUE ... { ... }` in a text, up to its matching brace."""
    found = []
    for header in HEADER.finditer(text):
        depth = 0
        for end in range(header.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
        found.append(text[header.start():end + 1])
    return found


def dsl_blocks(blocks: list[Block]) -> list[tuple[Block, str | None]]:
    """The blocks holding DSL programs, each with the error message the next block shows, if it
    shows one."""
    found = []
    for i, block in enumerate(blocks):
        if block.lang in ("", "epi") and programs(block.text):
            after = blocks[i + 1].text if i + 1 < len(blocks) else ""
            found.append((block, after.strip() if ERROR.match(after) else None))
    return found


def check_programs(block: Block, error: str | None) -> None:
    texts = programs(block.text)
    if error is None:
        for text in texts:
            coda.compile(text)
        return
    assert len(texts) == 1, f"{block}: an error example shows one program"
    with pytest.raises(coda.CodaError) as raised:
        coda.compile(texts[0])
    assert str(raised.value) == error, f"{block}: the documented error is not the one raised"


# ------------------------------------------------------------------------------------------------
# Python


class _Calls(ast.NodeVisitor):
    """Binds every call of a name the namespace holds (`coda.ops.linear(x, w, bias=b)`) to its
    callable's signature; names local to a function are left alone."""

    def __init__(self, namespace: dict, path: str):
        self.namespace, self.path, self.local, self.problems = namespace, path, [], []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        args = node.args
        names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg)
                 if a is not None}
        names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        self.local.append(names)
        self.generic_visit(node)
        self.local.pop()

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        chain, base = [], node.func
        while isinstance(base, ast.Attribute):
            chain.insert(0, base.attr)
            base = base.value
        if (not isinstance(base, ast.Name) or base.id not in self.namespace
                or any(base.id in names for names in self.local)):
            return
        target, name = self.namespace[base.id], base.id
        for attr in chain:
            if not hasattr(target, attr):
                self.problems.append(f"{self.path}:{node.lineno}: {name} has no attribute {attr!r}")
                return
            target, name = getattr(target, attr), f"{name}.{attr}"
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return
        try:
            signature = inspect.signature(target)
        except (TypeError, ValueError):   # a builtin without a Python signature
            return
        try:
            signature.bind(*node.args, **{k.arg: k.value for k in node.keywords})
        except TypeError as e:
            self.problems.append(f"{self.path}:{node.lineno}: {name}{signature}: {e}")


def run_python(block: Block) -> dict:
    """Run a block as the test runs it (setup, then the block or, if not run, its imports and
    definitions) in a fresh namespace, and check its calls; returns the namespace."""
    namespace = {"__name__": "__doc_example__"}
    if "setup" in block.notes:
        exec(compile(textwrap.dedent(block.notes["setup"]), f"{block} (setup)", "exec"), namespace)
    tree = ast.increment_lineno(ast.parse(block.text), block.line)   # the document's line numbers
    run = tree.body
    if "not run" in block.notes:
        run = [node for node in run if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef,
                                                         ast.ClassDef))]
    exec(compile(ast.Module(run, type_ignores=[]), block.path, "exec"), namespace)
    calls = _Calls(namespace, block.path)
    calls.visit(tree)
    assert not calls.problems, f"{block}: calls that do not fit:\n" + "\n".join(calls.problems)
    return namespace


@pytest.fixture
def as_a_user(monkeypatch, tmp_path):
    """A user's CPU session: no Triton interpreter (TRITON_INTERPRET itself is left as it is, so
    that a Triton imported meanwhile keeps the mode the other tests need), a seed, a scratch
    directory. The kernels' math library is imported first, in this session's mode: it fixes its
    fast-math choice at import, as Triton fixes its interpreter mode (imported under the patch, it
    chose inline assembly, which every later interpreter test then failed on)."""
    importlib.import_module("coda.codegen.tl_math")
    monkeypatch.setattr(program, "interpreter_enabled", lambda: False)
    monkeypatch.setattr(cli, "interpreter_enabled", lambda: False)
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)


@pytest.mark.parametrize("block", PYTHON, ids=str)
def test_python_example(block, as_a_user):
    assert "not run" not in block.notes or block.notes["not run"], f"{block}: say why it is not run"
    try:
        run_python(block)
    except ModuleNotFoundError as e:
        if e.name != "transformers":
            raise
        pytest.skip("transformers is not installed (the dev extra has it)")


@pytest.mark.parametrize("block", [b for b in BLOCKS if "excerpt of" in b.notes], ids=str)
def test_excerpt_is_in_its_source(block):
    source = {line.strip() for line in (ROOT / block.notes["excerpt of"]).read_text().splitlines()}
    missing = [line for line in block.text.splitlines() if line.strip() and line.strip() not in source]
    assert not missing, f"{block}: not in {block.notes['excerpt of']}: {missing}"


# ------------------------------------------------------------------------------------------------
# The DSL


@pytest.mark.parametrize(("block", "error"), [pytest.param(b, e, id=f"{b}{' error' * bool(e)}")
                                              for b, e in dsl_blocks(BLOCKS)])
def test_dsl_example_compiles(block, error):
    check_programs(block, error)


def _ops_programs() -> list[tuple[str, coda.Program]]:
    """docs/ops.md's programs in the order it shows them, each as the op's code builds it."""
    linear, gated, rope, ce = (importlib.import_module(f"coda.ops.{name}")
                               for name in ("linear", "gated_mlp", "rope", "cross_entropy"))
    return [
        ("linear_gelu", linear.forward_program("gelu", True, True, False, True)),
        ("linear_gelu_grad", linear.backward_program("gelu", True, True)),
        ("linear_identity", linear.forward_program(None, True, True, True, False, stats=torch.bfloat16)),
        ("swiglu_up", gated.up_program("silu", "rstd", True)),
        ("gated_down", gated.down_program(True, torch.bfloat16)),
        ("swiglu_grad", gated.grad_program("silu", "rstd", True)),
        ("gated_dx", gated.dx_program(None, True, True)),
        ("ss_grad", gated.STATS_GRAD),
        ("qkv_rope", rope.forward_program(True)),
        ("qkv_rope", rope.forward_program(False, norm=True)),
        ("ce_forward", ce.forward_program(True, False, True, "round_bf16")),
        ("ce_grad", ce.grad_program(True, False, True, "round_bf16")),
        ("ce_norm_input", ce.NORM_INPUT),
        ("ce_dx_norm", ce.dx_norm_program(False)),
        ("ce_scale", ce.SCALE),
        ("ce_forward_exp", ce.exp_forward_program("round_bf16")),
    ]


def test_ops_doc_shows_the_programs_the_ops_run():
    # A program in docs/ops.md is a claim about what an op launches: its IR after the passes must
    # be the IR of the variant the op builds (a new program in the doc gets a row above).
    shown = [coda.compile(text) for block, _ in dsl_blocks([b for b in BLOCKS if b.path == "docs/ops.md"])
             for text in programs(block.text)]
    built = _ops_programs()
    assert [p.name for p in shown] == [name for name, _ in built]
    for doc, (_, real) in zip(shown, built, strict=True):
        assert doc.explain() == real.explain(), f"docs/ops.md's {doc.name} is not what the op runs"


# ------------------------------------------------------------------------------------------------
# The command line


@dataclass
class Command:
    block: Block
    line: int
    argv: list[str]

    def __str__(self) -> str:
        return f"{self.block.path}:{self.line}: coda {' '.join(self.argv)}"


def commands(blocks: list[Block]) -> list[Command]:
    """The `coda ...` (or `python -m coda ...`) command lines of the shell blocks, less those in
    usage notation (`[--compare]`, `...`)."""
    found = []
    for block in blocks:
        if block.lang not in ("bash", "sh", "shell", "console"):
            continue
        for n, line in enumerate(block.text.splitlines()):
            for part in line.split("#")[0].split("&&"):
                words = shlex.split(part)
                while words and re.fullmatch(r"\w+=\S*", words[0]):   # VAR=value coda ...
                    words.pop(0)
                if words[:1] == ["coda"]:
                    argv = words[1:]
                elif words[:3] == ["python", "-m", "coda"]:
                    argv = words[3:]
                elif words[:3] == ["python", "-m", "coda.train"]:
                    argv = ["train", *words[3:]]
                else:
                    continue
                if not any(w.startswith("[") or "..." in w or "|" in w for w in argv):
                    found.append(Command(block, block.line + 1 + n, argv))
    return found


def check_command(command: Command) -> None:
    """Parse a command line as `coda` would, and run it if it is cheap."""
    try:
        args = cli.build_parser().parse_args(command.argv)
    except SystemExit:
        pytest.fail(f"{command}: the command line does not parse (see the captured stderr)")
    if getattr(args, "file", None):
        assert (ROOT / args.file).is_file(), f"{command}: no such file"
    m, n, k = getattr(args, "shape", None) or (1, 1, 1)
    if args.command in ("explain", "check", "run") and m * n * k <= BIG_GEMM:
        assert cli.main(command.argv) == 0, f"{command}: exit status not 0"


@pytest.mark.parametrize("command", commands(BLOCKS), ids=str)
def test_command_line(command, as_a_user, monkeypatch):
    monkeypatch.chdir(ROOT)
    check_command(command)


# ------------------------------------------------------------------------------------------------
# The checks themselves


def test_the_documents_have_examples():
    # An extractor that finds nothing passes everything.
    assert len(PYTHON) >= 15 and len(commands(BLOCKS)) >= 8
    assert sum(len(programs(b.text)) for b, _ in dsl_blocks(BLOCKS)) >= 17
    assert sum(1 for _, error in dsl_blocks(BLOCKS) if error) >= 1
    assert sum("not run" in b.notes for b in PYTHON) <= 6, "most examples should run"


BROKEN = '''
```python
import coda
coda.compile("EPILOGUE f() { output = gelux(input); }")
```

<!-- not run: a broken call, never made -->
```python
from coda import ops

def layer(x, w):
    return ops.linear(x, w, activaton="gelu")
```

```
EPILOGUE g(bias: col) { output = input + bais; }
```

```
EPILOGUE h() { output = gelux(input); }
```

```
line 1, column 22: unknown function 'gelu'
```

```bash
coda check examples/swiglu.epi --size 64,64,64
coda explain examples/no_such_file.epi
```
'''


def test_a_broken_example_fails(as_a_user, monkeypatch):
    # Each kind of check catches the mistake it is there for.
    blocks = parse(BROKEN, "broken.md")
    runnable, skipped = blocks[:2]
    with pytest.raises(coda.CodaError, match="gelux"):
        run_python(runnable)
    with pytest.raises(AssertionError, match="activaton"):
        run_python(skipped)
    [(undeclared, no_error), (misreported, error)] = dsl_blocks(blocks)
    with pytest.raises(coda.CodaError, match="bais"):
        check_programs(undeclared, no_error)
    with pytest.raises(AssertionError, match="not the one raised"):
        check_programs(misreported, error)
    monkeypatch.chdir(ROOT)
    bad_option, missing_file = commands(blocks)
    with pytest.raises(pytest.fail.Exception):
        check_command(bad_option)
    with pytest.raises(AssertionError, match="no such file"):
        check_command(missing_file)
