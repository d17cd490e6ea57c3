"""The `coda` command line: run, check, explain, demo, exit codes and error messages.

The Triton path of the CLI is exercised with a stand-in backend (the reference, or one that
crashes) so that these tests stay fast and do not depend on the kernels; the kernels themselves
are tested elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import coda
from coda import cli
from coda.runtime.program import Program
from coda.runtime.reference import run_reference

EXAMPLES = Path(cli.__file__).parent / "examples"


@pytest.fixture
def no_triton(monkeypatch):
    """No interpreter: the CLI sees the reference backend only (on a machine without CUDA)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


class _FakeTriton:
    """Stands in for TritonProgram (its `start(launch)` and `launch(launch)` entry points):
    computes with the reference backend, or raises the error it is given."""

    def __init__(self, error: Exception | None = None):
        self.error = error
        self.launches = 0

    def launch(self, launch, config=None):
        self.launches += 1
        if self.error is not None:
            raise self.error
        return run_reference(launch)

    def start(self, launch, config=None):
        fake = self

        class Plan:
            def run(self, *args, **kwargs):
                return fake.launch(launch)

        return Plan(), self.launch(launch)


@pytest.fixture
def fake_triton(monkeypatch):
    """The CLI sees a Triton backend (as under TRITON_INTERPRET=1) that is the reference."""
    fake = _FakeTriton()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(Program, "triton", property(lambda self: fake))
    return fake


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "prog.epi"
    path.write_text(text)
    return str(path)


def test_examples_are_shipped_and_compile():
    names = {p.name for p in cli.example_files()}
    assert names >= {"bias_gelu_dropout_residual.epi", "residual_rms_stats.epi", "swiglu.epi",
                     "dgelu_bias_grad.epi", "rope.epi"}
    for path in cli.example_files():
        assert isinstance(coda.compile(path.read_text()), Program)


def test_top_level_examples_link_to_the_package():
    root = Path(__file__).resolve().parent.parent
    link = root / "examples"
    if not link.exists():
        pytest.skip("not run from a source checkout")
    assert link.resolve() == EXAMPLES.resolve()


@pytest.mark.parametrize("name", ["bias_gelu_dropout_residual", "swiglu", "rope"])
def test_check_passes_on_the_reference(no_triton, capsys, name):
    code = cli.main(["check", str(EXAMPLES / f"{name}.epi"), "--shape", "9,12,5"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "reference" in out and "PASS" in out and "FAIL" not in out


def test_check_table_lists_every_output(no_triton, capsys):
    code = cli.main(["check", str(EXAMPLES / "bias_gelu_dropout_residual.epi"), "--dtype",
                     "float16", "--shape", "8x10x4"])
    out = capsys.readouterr().out
    assert code == 0
    assert "rel. error" in out and "tolerance" in out
    assert "preact" in out and "[8, 10]" in out
    assert out.strip().splitlines()[-1] == "PASS: 2 passed, 0 failed"


def test_check_unpacked_operands_and_accumulation(no_triton, tmp_path, capsys):
    # `up_scale` lives in the [M, N/2] domain and `output +=` needs an out= tensor.
    path = write(tmp_path, "EPILOGUE { gate, up = unpack(input); output += silu(gate) * up * s; "
                           "t = row_max(output); }")
    assert cli.main(["check", path, "--shape", "6,8,3"]) == 0
    assert "[6, 4]" in capsys.readouterr().out


def test_check_runs_triton_and_skips_bf16_on_the_interpreter(fake_triton, capsys):
    path = str(EXAMPLES / "dgelu_bias_grad.epi")
    assert cli.main(["check", path, "--shape", "7,6,5"]) == 0
    out = capsys.readouterr().out
    assert "triton" in out and fake_triton.launches == 1
    assert cli.main(["check", path, "--shape", "7,6,5", "--dtype", "bfloat16"]) == 0
    assert "SKIP" in capsys.readouterr().out


def test_relative_error_counts_matching_infinities_and_nans_as_exact():
    ref = torch.tensor([1.0, -float("inf"), float("nan"), float("inf")], dtype=torch.float64)
    close = torch.tensor([1.0 + 1e-6, -float("inf"), float("nan"), float("inf")])
    assert cli.relative_error(close, ref) == pytest.approx(1e-6, rel=0.1)   # float32 rounding of 1 + 1e-6
    for wrong in ([1.0, float("inf"), float("nan"), float("inf")], [1.0, -float("inf"), 0.0, float("inf")],
                  [1.0, -1e30, float("nan"), float("inf")], [float("nan"), -float("inf"), float("nan"), 1.0]):
        assert cli.relative_error(torch.tensor(wrong), ref) == float("inf"), wrong


def test_check_fails_with_exit_1_when_a_backend_is_wrong(monkeypatch, fake_triton, capsys):
    def off_by_a_bit(launch):
        outs = run_reference(launch)
        outs["output"] += 0.1
        return outs

    monkeypatch.setattr(fake_triton, "launch", off_by_a_bit)
    assert cli.main(["check", str(EXAMPLES / "swiglu.epi"), "--shape", "4,6,3"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and out.strip().splitlines()[-1].startswith("FAIL")


def test_check_reports_a_crashing_backend_as_a_failure(fake_triton, capsys):
    fake_triton.error = RuntimeError("kernel exploded\nmore detail")
    assert cli.main(["check", str(EXAMPLES / "rope.epi"), "--shape", "4,6,3"]) == 1
    out = capsys.readouterr().out
    assert "RuntimeError: kernel exploded" in out and "Traceback" not in out


def test_check_falls_back_to_the_reference_without_a_triton_backend(fake_triton, capsys):
    fake_triton.error = NotImplementedError("no kernels yet")
    assert cli.main(["check", str(EXAMPLES / "rope.epi"), "--shape", "4,6,3"]) == 0
    out = capsys.readouterr().out
    assert "not available" in out and "PASS" in out


def test_check_bad_program_exits_2_with_a_caret(tmp_path, capsys):
    path = write(tmp_path, "EPILOGUE {\n  h = input + bias;\n  output = gelux(h);\n}\n")
    assert cli.main(["check", path]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "line 3, column 12" in captured.err and "gelux" in captured.err
    assert "did you mean 'gelu'" in captured.err
    assert captured.err.rstrip().endswith("^") and "Traceback" not in captured.err


def test_check_bad_launch_exits_2(no_triton, capsys):
    assert cli.main(["check", str(EXAMPLES / "swiglu.epi"), "--shape", "4,5,3"]) == 2
    assert "N must be even" in capsys.readouterr().err


def test_check_missing_file_and_bad_shape_exit_2(capsys):
    assert cli.main(["check", "no/such/file.epi"]) == 2
    assert "No such file" in capsys.readouterr().err
    assert cli.main(["check", str(EXAMPLES / "rope.epi"), "--shape", "4,6"]) == 2
    assert "M,N,K" in capsys.readouterr().err


def test_a_file_not_utf8_and_a_shape_too_large_exit_2(tmp_path, capsys):
    binary = tmp_path / "bin.epi"
    binary.write_bytes(b"output = input; # caf\xe9\n")   # Latin-1 in a comment
    assert cli.main(["run", str(binary)]) == 2
    assert "bin.epi: not UTF-8 text: byte 0xe9 at offset 21" in capsys.readouterr().err
    huge = ["--shape", "100000000,100000000,100000000", "--backend", "reference"]
    assert cli.main(["run", str(EXAMPLES / "rope.epi"), *huge]) == 2
    err = capsys.readouterr().err
    assert "cannot allocate a [100000000, 100000000] input" in err and "Traceback" not in err


def test_a_shape_beyond_int64_is_a_usage_error(capsys):
    """A size past torch's int64 was a TypeError traceback from torch.randn."""
    assert cli.main(["run", str(EXAMPLES / "rope.epi"), "--shape", "99999999999999999999999,2,2"]) == 2
    err = capsys.readouterr().err
    assert "argument --shape: expected M,N,K (three positive integers below 2**63)" in err


def test_outputs_that_do_not_fit_exit_2(no_triton, tmp_path, capsys):
    """Inputs that fit (K = 1) but an [M, N] output that cannot (2**50 bytes): the launch's
    allocation failed with a traceback, in `run` and in `check`'s reference run."""
    path = write(tmp_path, "output = input;")
    for command in ("run", "check"):
        assert cli.main([command, path, "--shape", "16777216,16777216,1"]) == 2
        err = capsys.readouterr().err
        assert f"{path}: --shape 16777216,16777216,1: out of memory on cpu (" in err, err
        assert err.count("\n") == 1, err


def test_check_reports_a_backend_out_of_memory_as_an_error(fake_triton, capsys):
    """An allocation failure in a backend is no backend bug: exit 2, not a FAIL row (exit 1)."""
    fake_triton.error = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 52.00 GiB")
    assert cli.main(["check", str(EXAMPLES / "rope.epi"), "--shape", "4,6,3"]) == 2
    assert "--shape 4,6,3: out of memory on cpu (CUDA out of memory." in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "check", "demo"])
def test_a_seed_beyond_torch_is_a_usage_error(capsys, command):
    """A seed past torch's generators was a ValueError traceback (for `check`, after its header)."""
    file = [] if command == "demo" else [str(EXAMPLES / "rope.epi")]
    assert cli.main([command, *file, "--seed", str(2**64)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "argument --seed: expected an integer seed, |seed| < 2**63" in captured.err


def test_check_of_triton_alone_in_bfloat16_on_the_interpreter_exits_2(fake_triton, capsys):
    """It printed one SKIP row and "PASS: 0 passed, 0 failed" with exit 0: nothing was checked."""
    assert cli.main(["check", str(EXAMPLES / "rope.epi"), "--backend", "triton", "--dtype", "bfloat16"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "--backend triton --dtype bfloat16: bfloat16 is not supported" in captured.err
    assert fake_triton.launches == 0


def test_ctrl_c_is_a_line_and_exit_130(monkeypatch, capsys):
    """Ctrl-C in any command was a KeyboardInterrupt traceback."""
    def interrupted(path):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "load_program", interrupted)
    try:
        code = cli.main(["check", str(EXAMPLES / "rope.epi")])
    except KeyboardInterrupt:   # (uncaught, it would end the test session)
        pytest.fail("KeyboardInterrupt escaped cli.main")
    assert code == 130 and capsys.readouterr().err == "coda: interrupted\n"


def test_a_python_file_is_told_to_use_the_dsl(capsys):
    """For examples/layer_scale.py the one message was the DSL's about a docstring ("there are no
    strings; for infinity, ... write 1e400")."""
    assert cli.main(["check", str(EXAMPLES / "layer_scale.py")]) == 2
    err = capsys.readouterr().err
    assert "line 1, column 1" in err and "a Python file: `coda` reads programs in the DSL, .epi files" in err


def test_check_triton_requested_but_unavailable_exits_2(no_triton, capsys):
    assert cli.main(["check", str(EXAMPLES / "rope.epi"), "--backend", "triton"]) == 2
    assert "TRITON_INTERPRET" in capsys.readouterr().err


def test_run_summarizes_every_output(no_triton, capsys):
    path = EXAMPLES / "bias_gelu_dropout_residual.epi"
    assert cli.main(["run", str(path), "--shape", "8,10,4", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    prog = cli.load_program(path)
    a, b, operands, _ = cli.make_inputs(prog, (8, 10, 4), torch.float32, 3, torch.device("cpu"))
    want = prog.reference(a, b, seed=3, **operands)
    assert set(want) == {"output", "preact"}
    for name, t in want.items():
        line = next(row for row in out.splitlines() if row.startswith(f"{name} ") and "[" in row)
        assert line.split()[1:4] == ["[8,", "10]", "float32"], line
        assert line.split()[4:] == [f"{t.mean().item():.4g}", f"{t.abs().max().item():.4g}", "0"], line
    assert "timings need a CUDA GPU" in out


def test_run_bad_launch_exits_2(no_triton, capsys):
    assert cli.main(["run", str(EXAMPLES / "swiglu.epi"), "--shape", "4,5,3"]) == 2
    assert "N must be even" in capsys.readouterr().err


def test_run_bfloat16_under_the_interpreter_uses_the_reference(monkeypatch, capsys):
    """The interpreter does not support bfloat16: `auto` gave outputs of order 1e21 through it."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["run", str(EXAMPLES / "swiglu.epi"), "--shape", "16,32,8", "--dtype", "bfloat16"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("output  ["))
    assert float(row.split()[5]) < 100, row   # abs max of SiLU(x) * y with x, y of order one
    assert cli.main(["run", str(EXAMPLES / "swiglu.epi"), "--dtype", "bfloat16", "--backend", "triton"]) == 2
    assert "--backend triton --dtype bfloat16: bfloat16 is not supported by the Triton interpreter" in (
        capsys.readouterr().err)


@pytest.mark.parametrize("repeat", ["0", "-3"])
def test_run_repeat_must_be_positive(capsys, repeat):
    """`--repeat 0` took the median of no timings on a GPU (an IndexError traceback)."""
    assert cli.main(["run", str(EXAMPLES / "swiglu.epi"), "--repeat", repeat]) == 2
    assert "argument --repeat: expected a positive int" in capsys.readouterr().err


def test_explain_prints_the_ir(capsys):
    assert cli.main(["explain", str(EXAMPLES / "swiglu.epi")]) == 0
    out = capsys.readouterr().out
    assert "# IR after passes" in out and "unpack" in out and "output: tile [M, N/2]" in out


def test_explain_with_a_shape_shows_kinds(monkeypatch, capsys):
    # With a backend that cannot generate kernels, the IR part and the operand kinds remain.
    class NoKernels:
        def explain(self, launch):
            raise NotImplementedError("no code generator")

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(Program, "triton", property(lambda self: NoKernels()))
    assert cli.main(["explain", str(EXAMPLES / "bias_gelu_dropout_residual.epi"),
                     "--shape", "8,6,4"]) == 0
    out = capsys.readouterr().out
    assert "# operand kinds" in out and "bias: col" in out and "residual: tile" in out
    assert "not shown" in out


def test_demo_reference_only(no_triton, monkeypatch, capsys):
    monkeypatch.setenv("CODA_AUTOTUNE", "0")  # demo sets it when unset: keep the process clean
    monkeypatch.setattr(cli, "DEMO_SHAPES", ((5, 6, 3), (9, 10, 4)))
    assert cli.main(["demo", "--dtypes", "float32", "float16"]) == 0
    out = capsys.readouterr().out
    assert "reference backend only" in out
    for name in ("bias_gelu_dropout_residual", "residual_rms_stats", "swiglu",
                 "dgelu_bias_grad", "rope"):
        assert name in out
    assert "demo passed" in out and " 0 failed" in out


def test_demo_runs_a_repeated_dtype_once(no_triton, monkeypatch, capsys):
    """`--dtypes float32 float32` checked everything twice and counted it twice."""
    monkeypatch.setenv("CODA_AUTOTUNE", "0")
    monkeypatch.setattr(cli, "DEMO_SHAPES", ((5, 6, 3),))
    counts = []
    for dtypes in (["float32"], ["float32", "float32"]):
        assert cli.main(["demo", "--dtypes", *dtypes]) == 0
        counts.append(capsys.readouterr().out.strip().splitlines()[-1])
    assert counts[0] == counts[1] and "outputs passed" in counts[0]


def test_demo_with_a_triton_backend(fake_triton, monkeypatch, capsys):
    monkeypatch.setenv("CODA_AUTOTUNE", "0")
    monkeypatch.setattr(cli, "DEMO_SHAPES", ((5, 6, 3),))
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "interpreter" in out and "backends: reference, triton" in out
    assert fake_triton.launches == 5 * 2  # every example, float32 and float16 (bf16 skipped)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """`python -m coda ARGS` in a fresh process, without TRITON_INTERPRET set (as a user has it)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "coda", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_closed_standard_input_is_a_one_line_error():
    """`coda check - <&-` raised an AttributeError (sys.stdin is None): an audit's find."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    closed = subprocess.run([sys.executable, "-m", "coda", "check", "-"], capture_output=True, text=True,
                            env=env, timeout=300, stdin=subprocess.DEVNULL, close_fds=True,
                            preexec_fn=lambda: os.close(0))
    assert closed.returncode == 2 and "standard input is closed" in closed.stderr, closed.stderr
    assert "Traceback" not in closed.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU interpreter path")
@pytest.mark.parametrize(("command", "fragments"), [("check", ("triton", "PASS: 2 passed, 0 failed")),
                                                    ("run", ("[9, 10]", "ss "))])
def test_backend_triton_runs_the_real_kernels_in_the_interpreter(command, fragments):
    result = run_cli(command, str(EXAMPLES / "residual_rms_stats.epi"), "--shape", "9,10,5",
                     "--backend", "triton")
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(fragment in result.stdout for fragment in fragments), result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU interpreter path")
def test_explain_with_a_shape_shows_the_generated_kernel():
    result = run_cli("explain", str(EXAMPLES / "swiglu.epi"), "--shape", "8,12,4")
    assert result.returncode == 0, result.stderr
    assert "# operand kinds" in result.stdout and "rstd: row" in result.stdout
    assert "# Triton kernel" in result.stdout and "def " in result.stdout


def test_demo_does_not_import_triton_before_choosing_the_interpreter():
    # The package must not import triton at import time, or TRITON_INTERPRET would come too late.
    code = "import sys, coda, coda.cli; print('triton' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_python_dash_m_coda():
    result = run_cli("explain", str(EXAMPLES / "rope.epi"))
    assert result.returncode == 0, result.stderr
    assert "rope" in result.stdout


def test_help_exits_0(capsys):
    assert cli.main(["--help"]) == 0
    assert "check" in capsys.readouterr().out


def test_dsl_reference_lists_every_primitive():
    # docs/dsl.md's primitive table is committed markdown; keep it in step with the registry.
    from coda.primitives import PRIMITIVES

    doc = Path(__file__).resolve().parent.parent / "docs" / "dsl.md"
    if not doc.exists():
        pytest.skip("not run from a source checkout")
    text = doc.read_text()
    missing = [name for name in PRIMITIVES if f"| `{name}` |" not in text]
    assert not missing, f"docs/dsl.md lacks rows for {missing}"


def test_a_reader_that_leaves_early_gets_no_error_message():
    """`coda explain ... | head -1`: once the pipe's reader has gone the next write fails, which
    printed `coda: error: [Errno 32] Broken pipe` (exit 2); now nothing is said (exit 1)."""
    read, write = os.pipe()
    os.close(read)   # the reader leaves before the first line
    try:
        done = subprocess.run([sys.executable, "-m", "coda", "explain", str(EXAMPLES / "swiglu.epi")],
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
                              env=dict(os.environ, TRITON_INTERPRET="0"))
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (1, "")


def test_a_program_on_standard_input():
    """`-` reads the program from standard input (a generator's program need not be saved first);
    its errors name `-` and carry the DSL's line and column."""
    def coda_with(stdin: bytes, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "coda", *args], input=stdin, capture_output=True,
                              timeout=120, env=dict(os.environ, TRITON_INTERPRET="0"))

    program = b"EPILOGUE(bias: col) { output = gelu(input + bias); }"
    done = coda_with(program, "check", "-", "--shape", "8,8,8")
    assert done.returncode == 0 and b"PASS: 1 passed, 0 failed" in done.stdout, done.stderr
    done = coda_with(b"output = gelu(;", "explain", "-")
    assert done.returncode == 2
    assert done.stderr.decode().startswith("coda: error: -: line 1, column 15: expected an expression")
    not_utf8 = coda_with(b"\xff", "check", "-")
    assert not_utf8.stderr == b"coda: error: -: not UTF-8 text: byte 0xff at offset 0\n"
