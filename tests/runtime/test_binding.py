"""Launch validation: every mistake at a launch is a LaunchError naming the operand and what was
expected, raised before any backend sees the tensors."""

from __future__ import annotations

import os

import pytest
import torch

import coda
from coda.runtime import binding, program
from oracle import launch_inputs

F64 = torch.float64


def _ab(m=4, n=6, k=3, dtype=F64):
    return launch_inputs(m, n, k, seed=0, dtype=dtype)


def _launch_error(prog, *args, **kwargs) -> str:
    with pytest.raises(coda.LaunchError) as info:
        prog.reference(*args, **kwargs)
    assert isinstance(info.value, coda.CodaError)
    return str(info.value)


# A and B ---------------------------------------------------------------------------------------------


def test_a_b_k_mismatch():
    prog = coda.compile("output = input;")
    a, _ = _ab(4, 6, 3)
    b = torch.ones(5, 6, dtype=F64)
    text = _launch_error(prog, a, b)
    assert "[4, 3]" in text and "[5, 6]" in text and "K differ (3 vs 5)" in text


@pytest.mark.parametrize("which", ["A", "B"])
def test_int_matrices_are_refused(which):
    prog = coda.compile("output = input;")
    a, b = _ab()
    if which == "A":
        a = a.to(torch.int32)
    else:
        b = b.to(torch.int64)
    text = _launch_error(prog, a, b)
    assert f"{which} has dtype torch.int" in text and "float16, bfloat16, float32, float64" in text


def test_a_b_must_be_2d_tensors():
    """B = None (an unloaded weight) ran the epilogue on A as a map, without a GEMM."""
    prog = coda.compile("output = input;")
    a, b = _ab()
    assert "A must be a torch.Tensor, got list" in _launch_error(prog, a.tolist(), b)
    assert "B must be a torch.Tensor, got None (to run the epilogue" in _launch_error(prog, a, None)
    assert "B must be a torch.Tensor, got None" in _launch_error(prog, a[None].expand(2, 4, 3), None)
    assert "B must be 2-D" in _launch_error(prog, a, b[None])
    assert "A must be 2-D" in _launch_error(prog, a[0], b)


def test_a_b_on_different_devices():
    prog = coda.compile("output = input;")
    a, b = _ab()
    assert "B is on meta but A is on cpu" in _launch_error(prog, a, b.to("meta"))


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_a_b_of_different_dtypes_on_either_backend(backend):
    """The reference once computed a float64 B in A's float32 (a silent loss of B's digits) where
    the Triton backend refused the pair: code tried on the CPU must run the same on a GPU."""
    prog = coda.compile("output = input;")
    a, b = _ab()
    with pytest.raises(coda.LaunchError, match=r"A is torch\.float32 but B is torch\.float64: a GEMM "
                                               r"takes one input dtype"):
        prog(a.float(), b.double(), backend=backend)


# operands ---------------------------------------------------------------------------------------------


def test_missing_operand():
    prog = coda.compile("EPILOGUE (bias: col, r) { output = input + bias + r; }")
    a, b = _ab()
    text = _launch_error(prog, a, b, r=1.0)
    assert "missing operand 'bias' (kind col)" in text and "prog(a, b, bias=...)" in text
    text = _launch_error(prog, a, b, bias=torch.zeros(6, dtype=F64))
    assert "missing operand 'r'" in text


def test_unknown_operand_with_suggestion():
    prog = coda.compile("output = input + bias * scale;")
    a, b = _ab()
    text = _launch_error(prog, a, b, bais=torch.zeros(6, dtype=F64), scale=1.0)
    assert "unknown operand 'bais'" in text and "did you mean 'bias'?" in text
    assert "bias, scale" in text
    text = _launch_error(coda.compile("output = input;"), a, b, zzz=1)
    assert "unknown operand 'zzz'" in text and "operands are: none" in text


def test_misspelt_launch_option_is_an_unknown_operand():
    prog = coda.compile("output = input;")
    a, b = _ab()
    assert "unknown operand 'outdtype'" in _launch_error(prog, a, b, outdtype=torch.float32)


@pytest.mark.parametrize("kind, shape, expected", [
    ("tile", (4, 5), "[4, 6]"), ("tile", (6, 4), "[4, 6]"), ("row", (6,), "[4]"), ("row", (4, 1), "[4]"),
    ("col", (4,), "[6]"), ("col", (1, 6), "[6]"), ("head", (3, 2), "[4, H]"), ("head", (4,), "[4, H]"),
    ("head", (4, 0), "[4, H]"),
])
def test_wrong_operand_shape_names_operand_and_expected_shape(kind, shape, expected):
    body = "rope(input, x, x)" if kind == "head" else "input * x"
    prog = coda.compile(f"EPILOGUE (x: {kind}) {{ output = {body}; }}")
    a, b = _ab(4, 6, 3)
    text = _launch_error(prog, a, b, x=torch.ones(shape, dtype=F64))
    assert f"operand 'x' (kind {kind})" in text
    assert f"expected shape {expected}" in text and f"got tensor of shape {list(shape)}" in text


def test_wrong_operand_shape_in_the_pair_domain():
    prog = coda.compile("EPILOGUE (t: tile, c: col) { g, u = unpack(input); output = g * t + c; }")
    a, b = _ab(4, 6, 3)
    text = _launch_error(prog, a, b, t=torch.ones(4, 6, dtype=F64), c=torch.ones(3, dtype=F64))
    assert "operand 't' (kind tile): expected shape [4, 3]" in text
    text = _launch_error(prog, a, b, t=torch.ones(4, 3, dtype=F64), c=torch.ones(6, dtype=F64))
    assert "operand 'c' (kind col): expected shape [3]" in text


def test_undeclared_operand_that_fits_no_kind():
    prog = coda.compile("output = input + x;")
    a, b = _ab(4, 6, 3)
    text = _launch_error(prog, a, b, x=torch.ones(5, dtype=F64))
    assert "operand 'x'" in text and "fits no operand kind" in text
    assert "tile [4, 6], row [4], col [6]" in text
    for bad in ([1.0] * 6, "abc", None.__class__, True):
        assert "operand 'x'" in _launch_error(prog, a, b, x=bad)


def test_ambiguous_operand_kind_m_equals_n():
    prog = coda.compile("output = input + v;")
    a, b = _ab(5, 5, 2)
    text = _launch_error(prog, a, b, v=torch.ones(5, dtype=F64))
    assert "operand 'v'" in text and "fits kinds row and col" in text and "`v: row`" in text
    declared = coda.compile("EPILOGUE (v: col) { output = input + v; }")
    v = torch.arange(5, dtype=F64)
    assert torch.equal(declared.reference(a, b, v=v)["output"], a @ b + v[None, :])


def test_tensor_given_for_scalar_and_number_for_tensor():
    prog = coda.compile("EPILOGUE (s: scalar, r: row) { output = input * s + r; }")
    a, b = _ab(4, 6, 3)
    text = _launch_error(prog, a, b, s=torch.ones(4, dtype=F64), r=torch.ones(4, dtype=F64))
    assert "operand 's' (kind scalar)" in text and "a number or 0-d tensor" in text
    text = _launch_error(prog, a, b, s=1.0, r=2.0)
    assert "operand 'r'" in text and "expected a tensor of shape [4] (kind row), got float" in text
    text = _launch_error(prog, a, b, s=True, r=torch.ones(4, dtype=F64))
    assert "operand 's'" in text
    out = prog.reference(a, b, s=torch.tensor(2.0, dtype=F64), r=torch.ones(4, dtype=F64))["output"]
    assert torch.equal(out, (a @ b) * 2 + 1)


def test_int_operand_is_refused():
    prog = coda.compile("output = input + bias;")
    a, b = _ab(4, 6, 3)
    text = _launch_error(prog, a, b, bias=torch.ones(6, dtype=torch.int64))
    assert "operand 'bias' has dtype torch.int64" in text and "floating-point" in text


def test_operand_on_another_device():
    prog = coda.compile("output = input + bias;")
    a, b = _ab(4, 6, 3)
    assert "operand 'bias' is on meta" in _launch_error(prog, a, b, bias=torch.ones(6, device="meta"))


def test_operands_of_other_float_dtypes_are_converted():
    prog = coda.compile("output = input + bias;")
    a, b = _ab(4, 6, 3)
    bias = torch.arange(6, dtype=torch.float16)
    assert torch.equal(prog.reference(a, b, bias=bias)["output"], a @ b + bias.double()[None, :])


# pairs, rope, domains ------------------------------------------------------------------------------------


def test_odd_n_with_unpack():
    prog = coda.compile("g, u = unpack(input);\noutput = g * u;")
    a, b = _ab(4, 7, 3)
    assert "N must be even; got N = 7" in _launch_error(prog, a, b)


def test_rope_needs_an_even_number_of_columns():
    prog = coda.compile("output = rope(input, c, s);")
    a, b = _ab(4, 7, 3)
    text = _launch_error(prog, a, b, c=torch.ones(4, 2, dtype=F64), s=torch.ones(4, 2, dtype=F64))
    assert "rope rotates column pairs" in text and "N = 7" in text
    pairs = coda.compile("g, u = unpack(input);\noutput = rope(g, c, s) * u;")
    a, b = _ab(4, 6, 3)                              # N/2 = 3 is odd
    text = _launch_error(pairs, a, b, c=torch.ones(4, 1, dtype=F64), s=torch.ones(4, 1, dtype=F64))
    assert "rope rotates column pairs" in text and "it has 3 (N = 6)" in text


def test_rope_tables_of_two_widths_are_refused():
    prog = coda.compile("output = rope(input, c, s);")
    a, b = _ab(4, 6, 3)
    text = _launch_error(prog, a, b, c=torch.ones(4, 3, dtype=F64), s=torch.ones(4, 2, dtype=F64))
    assert "rope's tables 'c' and 's' must have one shape" in text and "[4, 3] and [4, 2]" in text


def test_operand_mixing_domains_is_refused_at_launch():
    prog = coda.compile("g, u = unpack(input);\noutput = g * w;\nsave f = input * w;")
    a, b = _ab(4, 6, 3)
    with pytest.raises(coda.CodaError, match=r"'w' of kind col is used with both \[M, N\]"):
        prog.reference(a, b, w=torch.ones(6, dtype=F64))


# out=, out_dtype, seed, backend --------------------------------------------------------------------------


def test_accumulation_needs_out():
    prog = coda.compile("output += input;")
    a, b = _ab()
    text = _launch_error(prog, a, b)
    assert "accumulates into `output`" in text and "out=" in text


@pytest.mark.parametrize("out, fragment", [
    (torch.zeros(4, 5, dtype=F64), "out=: expected shape [4, 6], got [4, 5]"),
    (torch.zeros(4, 6, dtype=torch.float32), None),
    (torch.zeros(4, 6, dtype=F64).tolist(), "out= must be a torch.Tensor, got list"),
    (torch.zeros(4, 6, device="meta", dtype=F64), "out= is on meta but A is on cpu"),
])
def test_bad_out(out, fragment):
    prog = coda.compile("output = input;")
    a, b = _ab()
    if fragment is None:        # out's dtype sets the output dtype unless out_dtype disagrees
        prog.reference(a, b, out=out)
        text = _launch_error(prog, a, b, out=out, out_dtype=F64)
        assert "out=: expected dtype torch.float64 (the output dtype), got torch.float32" in text
    else:
        assert fragment in _launch_error(prog, a, b, out=out)


def test_out_for_pair_programs_has_half_the_columns():
    prog = coda.compile("g, u = unpack(input);\noutput += g;")
    a, b = _ab(4, 6, 3)
    assert "expected shape [4, 3], got [4, 6]" in _launch_error(prog, a, b, out=torch.zeros(4, 6, dtype=F64))


def test_out_may_not_share_memory_with_a_or_b():
    """A GEMM's tiles read rows of A and columns of B after other tiles have stored theirs: an
    out= in A or B would be read half overwritten. The check also runs on a cached launch."""
    prog = coda.compile("output = input;")
    a, b = _ab(6, 6, 6)
    for out, name in ((a, "A"), (b, "B"), (a.T, "A"), (b[:, :], "B")):
        assert f"out= shares memory with {name}" in _launch_error(prog, a, b, out=out)
    buffer = torch.randn(18, 6, dtype=F64)
    a, b = buffer[:6], buffer[6:12]                  # neighbours in one buffer, apart
    assert "shares memory with B" in _launch_error(prog, a, b, out=buffer[9:15])
    prog.reference(a, b, out=buffer[12:])
    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        a32, b32 = (t.to("cuda" if torch.cuda.is_available() else "cpu", torch.float32) for t in _ab(6, 6, 6))
        prog(a32, b32, out=torch.empty_like(a32), backend="triton")        # the plan is cached now
        with pytest.raises(coda.LaunchError, match="out= shares memory with A"):
            prog(a32, b32, out=a32, backend="triton")


def test_a_map_may_write_in_place_but_not_shifted():
    prog = coda.compile("output = input * 2.0;")
    x = torch.randn(5, 8, dtype=F64)
    want = 2 * x
    prog.map(x, out=x, backend="reference")
    assert torch.equal(x, want)
    with pytest.raises(coda.LaunchError, match="shares memory with the input: only a map's input"):
        prog.map(x[:, :4], out=x[:, 1:5], backend="reference")
    # the input's first bytes seen as another dtype: same pointer, shape and strides, but not the
    # same elements (it was taken for an in-place map: silently wrong, an audit's find)
    buffer = torch.randn(64 * 64)
    halves = buffer.view(torch.float16)[:4096].view(64, 64)
    with pytest.raises(coda.LaunchError, match="shares memory with the input"):
        prog.map(buffer.view(64, 64), out=halves, out_dtype=torch.float16, backend="reference")


def test_out_may_be_a_tile_operand_itself_but_overlap_no_other_operand():
    """`residual=x, out=x` is an in-place residual add (each tile reads its residual tile before
    it stores there); a shifted tile, or a row or column operand inside out=, would be read by
    other tiles after this one's store."""
    prog = coda.compile("output = input + r * s + c;")
    a, b = _ab(4, 6, 3)
    x = torch.randn(4, 6, dtype=F64)
    want = a @ b + x * 2.0 + 1.0
    prog.reference(a, b, r=x, s=torch.full((4,), 2.0, dtype=F64), c=torch.ones(6, dtype=F64), out=x)
    assert torch.allclose(x, want)
    buffer = torch.zeros(5, 6, dtype=F64)
    for operands, name in ((dict(r=buffer[1:]), "'r'"), (dict(s=buffer[0, :4]), "'s'"),
                           (dict(c=buffer[0]), "'c'")):
        values = dict(r=torch.zeros(4, 6, dtype=F64), s=torch.ones(4, dtype=F64),
                      c=torch.zeros(6, dtype=F64)) | operands
        text = _launch_error(prog, a, b, out=buffer[:4], **values)
        assert f"out= shares memory with operand {name}" in text


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_out_may_not_be_a_head_table_or_partials_even_of_its_own_layout(backend):
    """Only a tile operand is read at the output's own elements: a `head` table of out='s shape
    is read at column j mod H, a Partials' [P, M] parts down whole columns, so either as out=
    would be read by other tiles after their stores (the check let through any operand of out='s
    exact layout). Refused on the first launch and on a cached plan's."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a, b = (t.float().to(device) for t in _ab(6, 8, 3))
    rope = coda.compile("EPILOGUE (cos: head, sin: head) { output = rope(input, cos, sin); }")
    cos, sin = torch.randn(6, 8, device=device), torch.randn(6, 8, device=device)
    rope(a, b, cos=cos, sin=sin, out=torch.empty(6, 8, device=device), backend=backend)   # a plan
    with pytest.raises(coda.LaunchError, match="out= shares memory with operand 'cos'"):
        rope(a, b, cos=cos, sin=sin, out=cos, backend=backend)
    scale = coda.compile("EPILOGUE (s: row) { output = input * s; }")
    a, b = (t.float().to(device) for t in _ab(8, 8, 3))
    parts = torch.randn(8, 8, device=device)   # [P, M], out='s layout
    with pytest.raises(coda.LaunchError, match="out= shares memory with operand 's'"):
        scale(a, b, s=coda.Partials(parts), out=parts, backend=backend)


def test_expanded_out_is_refused():
    prog = coda.compile("output += input;")
    a, b = _ab()
    text = _launch_error(prog, a, b, out=torch.zeros(1, 6, dtype=F64).expand(4, 6))
    assert "out= has stride 0" in text and "[0, 1]" in text


def test_out_whose_elements_share_memory_is_refused():
    """An `as_strided` out= whose elements overlap would have tiles race to store them (the
    reference's copy silently kept the last); views that slicing and transposing make pass."""
    prog = coda.compile("output = input;")
    a, b = _ab()
    text = _launch_error(prog, a, b, out=torch.zeros(12, dtype=F64).as_strided((4, 6), (2, 1)))
    assert "out= (shape [4, 6], strides [2, 1]) has elements that share memory" in text
    buffer = torch.full((8, 18), float("nan"), dtype=F64)
    for out in (buffer[::2, ::3], torch.full((6, 4), float("nan"), dtype=F64).T):
        prog.reference(a, b, out=out)
        assert torch.equal(out, a @ b)
    assert not binding._self_overlapping(torch.zeros(1, 6).expand(0, 6))   # no elements


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_an_inference_tensor_is_out_only_inside_inference_mode(backend):
    """As PyTorch's in-place ops: a launch outside inference mode refuses to write an inference
    tensor (the reference's copy raised PyTorch's error, a kernel wrote it), also where the
    plan was made inside (the cached path)."""
    if backend == "triton" and not program.interpreter_enabled():
        pytest.skip("runs the kernel through the interpreter")
    prog = coda.compile("output = input;")
    a, b = _ab(dtype=torch.float32)
    with torch.inference_mode():
        out = torch.full((4, 6), float("nan"))
        prog(a, b, out=out, backend=backend)
    torch.testing.assert_close(out, a @ b)
    with pytest.raises(coda.LaunchError, match="out= is an inference tensor"):
        prog(a, b, out=out, backend=backend)


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_sparse_tensors_are_refused_by_name(backend):
    """A sparse A, B, operand or out= (2-D, or A with leading dimensions) is a LaunchError naming
    it, on either backend (the reference ran a sparse A, PyTorch raised on a sparse operand, and
    the cached path's key read strides that sparse tensors lack)."""
    prog = coda.compile("EPILOGUE(r: row) { output = input * r; }")
    a, b = _ab(dtype=torch.float32)
    r, out = torch.ones(4), torch.zeros(4, 6)
    cases = {"A": ((a.to_sparse(), b), {"r": r}), "B": ((a, b.to_sparse_csr()), {"r": r}),
             "operand 'r'": ((a, b), {"r": r.to_sparse()}),
             "out=": ((a, b), {"r": r, "out": out.to_sparse()}),
             "A ": ((a[None].to_sparse(), b), {"r": r[None]})}
    for name, (args, kwargs) in cases.items():
        with pytest.raises(coda.LaunchError, match=f"^{name.strip()} has layout torch.sparse"):
            prog(*args, backend=backend, **kwargs)


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_lazily_negated_views_are_refused_by_name(backend):
    """A tensor with PyTorch's negative bit (`.conj().imag`) holds the negatives of its values in
    memory: the Triton backend read and wrote that memory as it was (A, B, a tile operand or out=
    came out negated, silently); both backends now refuse it, naming it."""
    if backend == "triton" and not program.interpreter_enabled():
        pytest.skip("runs the kernel through the interpreter")

    def negated(t: torch.Tensor) -> torch.Tensor:
        view = torch.complex(torch.zeros_like(t), -t).conj().imag
        assert view.is_neg() and torch.equal(view, t)
        return view

    prog = coda.compile("EPILOGUE(t: tile) { output = input + t; }")
    a, b = _ab(dtype=torch.float32)
    t, out = torch.ones(4, 6), torch.zeros(4, 6)
    cases = {"A": ((negated(a), b), {"t": t}), "B": ((a, negated(b)), {"t": t}),
             "operand 't'": ((a, b), {"t": negated(t)}), "out=": ((a, b), {"t": t, "out": negated(out)})}
    for name, (args, kwargs) in cases.items():
        with pytest.raises(coda.LaunchError, match=f"^{name} is a lazily negated view"):
            prog(*args, backend=backend, **kwargs)
    want = a @ b + t
    torch.testing.assert_close(prog(a, negated(b).resolve_neg(), t=t, backend=backend)["output"], want)


def test_out_with_outputs_that_leave_output_out_is_refused():
    """out= was neither written nor returned when outputs= left 'output' out."""
    prog = coda.compile("output = input; s = row_sum(input);")
    a, b = _ab()
    text = _launch_error(prog, a, b, out=torch.zeros(4, 6, dtype=F64), outputs=["s"])
    assert "out= is where 'output' goes, but outputs= leaves 'output' out" in text


def test_outputs_naming_nothing_says_so():
    prog = coda.compile("output = input; s = row_sum(input);")
    a, b = _ab()
    assert "outputs= names no output; the program has: output, s" in _launch_error(prog, a, b, outputs=[])


def test_a_map_refuses_gemm_options_and_a_1d_x():
    prog = coda.compile("output = input * 2;")
    x = torch.randn(4, 6, dtype=F64)
    for option, value in (("k_limit", torch.tensor([3])), ("a_col_sums", True)):
        with pytest.raises(coda.LaunchError, match=f"{option}= is an option of a GEMM launch; a map"):
            prog.map(x, backend="reference", **{option: value})
    with pytest.raises(coda.LaunchError, match=r"X must be 2-D \(\[M, N\], or \[\.\.\., M, N\] with"):
        prog.map(x[0], backend="reference")


@pytest.mark.parametrize(("dtypes", "fragment"), [
    ({"nope": torch.float16}, "'nope' is not an output of the program; it has: output, s"),
    ({"s": torch.int32}, "the dtype of 's' must be a floating-point torch.dtype"),
    ({"s": "float16"}, "the dtype of 's' must be a floating-point torch.dtype"),
    ([("s", torch.float16)], "dtypes= takes a dict of output name -> torch.dtype")])
def test_bad_dtypes(dtypes, fragment):
    prog = coda.compile("output = input; s = row_sum(input);")
    a, b = _ab()
    assert fragment in _launch_error(prog, a, b, dtypes=dtypes)


def test_dtypes_store_each_output_rounded_once():
    """A reduction summed in float32 and stored in float16 is the float32 sum rounded once; a
    tile output takes its own dtype beside out_dtype's."""
    prog = coda.compile("output = input * 3.0; save pre = input; s = row_sum(input); c = col_sum(input);")
    a, b = _ab(dtype=torch.float32)
    plain = prog.reference(a, b)
    outs = prog.reference(a, b, dtypes={"s": torch.float16, "pre": torch.float64})
    assert (outs["s"].dtype, outs["pre"].dtype, outs["output"].dtype, outs["c"].dtype) == (
        torch.float16, torch.float64, torch.float32, torch.float32)
    assert torch.equal(outs["s"], plain["s"].to(torch.float16))
    assert torch.equal(outs["c"], plain["c"])


@pytest.mark.parametrize(("options", "fragment"), [
    (dict(a_col_sums=1), "a_col_sums= must be True or False, got 1"),
    (dict(a_col_sums=True, k_limit=torch.tensor([2])), "a_col_sums= and k_limit= cannot be combined"),
    (dict(a_col_sums=True, outputs=["output", "a_col_sums"]), "asked for by a_col_sums=True, not by name"),
    (dict(outputs=["a_col_sums"]), "'a_col_sums' is not an output of the program"),
    (dict(dtypes={"a_col_sums": torch.float16}), "'a_col_sums' is not an output of the program")])
def test_bad_a_col_sums(options, fragment):
    prog = coda.compile("output = input;")
    a, b = _ab()
    assert fragment in _launch_error(prog, a, b, **options)


def test_a_col_sums_are_a_gemms_only():
    """(`Program.map` has no such option: there it would be an unknown operand.)"""
    prog = coda.compile("output = input;")
    with pytest.raises(coda.LaunchError, match="a_col_sums= sums the columns of a GEMM's A: a map has none"):
        prog.bind(_ab()[0], None, a_col_sums=True)


def test_a_col_sums_of_the_reference_backend():
    """The sums of A's columns over its rows (under m_limit, the rows before it), in float32 or
    what dtypes= names; the epilogue's outputs are those of the launch without them."""
    prog = coda.compile("output = input * 2.0; c = col_sum(input);")
    a, b = _ab(m=7, n=5, k=4, dtype=torch.float32)
    outs = prog.reference(a, b, a_col_sums=True)
    assert outs["a_col_sums"].shape == (4,) and outs["a_col_sums"].dtype == torch.float32
    torch.testing.assert_close(outs["a_col_sums"], a.sum(0))
    plain = prog.reference(a, b)
    assert torch.equal(outs["output"], plain["output"]) and torch.equal(outs["c"], plain["c"])
    limited = prog.reference(a, b, a_col_sums=True, m_limit=torch.tensor([3]),
                             dtypes={"a_col_sums": torch.float16})
    assert limited["a_col_sums"].dtype == torch.float16
    torch.testing.assert_close(limited["a_col_sums"], a[:3].sum(0).half())


@pytest.mark.parametrize("dtype", [torch.int32, "float32", torch.bool])
def test_bad_out_dtype(dtype):
    prog = coda.compile("output = input;")
    a, b = _ab()
    assert "out_dtype must be a floating-point torch.dtype" in _launch_error(prog, a, b, out_dtype=dtype)
    # an integer out= names out=, not the out_dtype the caller did not give
    text = _launch_error(prog, a, b, out=torch.zeros(4, 6, dtype=torch.int32))
    assert "out= has dtype torch.int32; the output is floating point" in text


def test_dropout_without_seed_and_bad_seeds():
    prog = coda.compile("output = dropout(input, 0.1);")
    a, b = _ab()
    assert "uses dropout: pass an integer seed=" in _launch_error(prog, a, b)
    for seed in (1.5, "3", True, None):
        assert "seed" in _launch_error(prog, a, b, seed=seed)
    plain = coda.compile("output = input;")
    assert "seed= must be an integer, got 'x'" in _launch_error(plain, a, b, seed="x")
    assert torch.equal(plain.reference(a, b, seed=3)["output"], a @ b)


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan"), torch.tensor(-0.5), torch.tensor(1.5)])
def test_dropout_probability_out_of_range_at_launch(p):
    prog = coda.compile("output = dropout(input, p);")
    a, b = _ab()
    text = _launch_error(prog, a, b, p=p, seed=0)
    assert "operand 'p' is a dropout probability" in text and "[0, 1]" in text


@pytest.mark.parametrize(("p", "bound"), [(-0.5, 0.0), (1.5, 1.0), (float("nan"), 1.0)])
def test_a_device_tensor_probability_outside_0_1_acts_as_the_nearest_bound(monkeypatch, p, bound):
    """A device tensor's probability is not read back at launch (that would synchronize); the
    kernel and the reference both take it as the nearest bound (NaN as 1). Here the CPU check is skipped
    to let the out-of-range value through, as a CUDA tensor's would be."""
    for module in (binding, program):
        monkeypatch.setattr(module, "check_per_call", lambda *args: None)
    prog = coda.compile("EPILOGUE(p: scalar) { output = dropout(input, p); }")
    device = "cuda" if torch.cuda.is_available() else "cpu"   # else tests/conftest.py's interpreter
    a, b = (t.to(device) for t in _ab(dtype=torch.float32))
    want = prog(a, b, p=bound, seed=4, backend="reference")["output"]
    for backend in ("reference", "triton"):
        got = prog(a, b, p=torch.tensor(p, device=device), seed=4, backend=backend)["output"]
        torch.testing.assert_close(got, want, msg=backend)


def test_bad_backend_name():
    prog = coda.compile("output = input;")
    a, b = _ab()
    with pytest.raises(coda.LaunchError, match="backend must be one of auto, triton, reference; got 'cuda'"):
        prog(a, b, backend="cuda")


def test_triton_backend_on_cpu_without_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    prog = coda.compile("output = input;")
    a, b = _ab()
    with pytest.raises(coda.LaunchError, match="needs CUDA tensors, or CPU tensors with TRITON_INTERPRET=1"):
        prog(a, b, backend="triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(coda.LaunchError, match="TRITON_INTERPRET=1"):
        prog(a, b, backend="triton")


@pytest.mark.parametrize(("value", "on"), [("1", True), ("true", True), ("Yes", True), ("ON", True),
                                           ("y", True), ("0", False), ("false", False), ("2", False)])
def test_the_interpreter_is_on_where_triton_reads_it_so(monkeypatch, value, on):
    """TRITON_INTERPRET as Triton's own getenv_bool reads it: with `true` Triton interpreted
    while CODA took the reference backend for CPU tensors."""
    from triton import knobs

    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert program.interpreter_enabled() is on is knobs.runtime.interpret


def test_meta_tensors_take_the_reference_even_under_the_interpreter(monkeypatch):
    """No kernel runs on meta tensors: `auto` gives the reference (shapes only), `triton` a
    LaunchError naming the device."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    prog = coda.compile("output = gelu(input) + r; s = row_sum(input);")
    a, b, r = (torch.empty(shape, device="meta") for shape in ((8, 4), (4, 6), (8, 6)))
    outs = prog(a, b, r=r)
    assert outs["output"].shape == (8, 6) and outs["s"].shape == (8,) and outs["s"].is_meta
    with pytest.raises(coda.LaunchError, match="A is on meta"):
        prog(a, b, r=r, backend="triton")


def test_meta_tensors_take_out():
    """Shape propagation on meta tensors (the LM head's cross-entropy and qkv_rope launch with
    out=): each meta tensor's data_ptr is 0, which is no shared memory."""
    prog = coda.compile("output = input + r; s = row_sum(input);")
    a, b, r = (torch.empty(shape, device="meta") for shape in ((8, 4), (4, 6), (8, 6)))
    out = torch.empty(8, 6, device="meta")
    outs = prog(a, b, r=r, out=out)
    assert outs["output"] is out and outs["s"].shape == (8,) and outs["s"].is_meta
    assert prog.map(r, r=r, out=out)["output"] is out


def test_errors_come_before_any_backend_runs(monkeypatch):
    """Binding fails first: a bad launch on the Triton path never reaches the kernels."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    prog = coda.compile("output = input + bias;")
    a, b = _ab()
    monkeypatch.setattr(type(prog), "triton", property(lambda self: pytest.fail("backend reached")))
    with pytest.raises(coda.LaunchError, match="missing operand 'bias'"):
        prog(a, b, backend="triton")


def test_bind_reports_kinds_shapes_and_seed():
    prog = coda.compile("h = input + bias;\nsave pre = h;\noutput = dropout(h * r, p);\n"
                        "s = col_sum(h);\nt = row_max(h);")
    a, b = _ab(4, 6, 3)
    launch = prog.bind(a, b, bias=torch.ones(6, dtype=F64), r=torch.ones(4, dtype=F64), p=0.2,
                       seed=2**33 + 7, out_dtype=torch.float32)
    assert launch.kinds == {"bias": "col", "r": "row", "p": "scalar"}
    assert (launch.m, launch.n, launch.k) == (4, 6, 3)
    assert launch.seed == 7
    assert [(o.name, o.shape, o.dtype, o.reduction) for o in launch.outputs] == [
        ("output", (4, 6), torch.float32, None), ("pre", (4, 6), torch.float32, None),
        ("s", (6,), torch.float32, "col_sum"), ("t", (4,), torch.float32, "row_max")]


def test_operands_may_be_named_like_the_launch_arguments():
    prog = coda.compile("EPILOGUE(x: tile, a: row, b: col) { output = input + x * a * b; }")
    a, b = torch.randn(4, 3, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)
    ones = dict(x=torch.ones(4, 5, dtype=torch.float64), a=torch.ones(4, dtype=torch.float64),
                b=torch.ones(5, dtype=torch.float64))
    assert torch.allclose(prog(a, b, **ones)["output"], a @ b + 1)
    assert torch.allclose(prog.map(a @ b, **ones)["output"], a @ b + 1)


def test_a_cached_launch_still_checks_the_seed_and_the_probabilities():
    """A launch whose plan is cached skips validation, but not of the values outside the plan's
    key: a probability out of [0, 1] or a non-integer seed would otherwise run silently."""
    prog = coda.compile("EPILOGUE(p: scalar) { output = dropout(input, p); }")
    a, b = (t.to("cuda" if torch.cuda.is_available() else "cpu") for t in _ab(dtype=torch.float32))
    prog(a, b, p=0.5, seed=1, backend="triton")
    assert len(prog._plans) == 1   # the next launches take the cached plan
    for p, seed, match in ((1.5, 1, "operand 'p' is a dropout probability"),
                           (float("nan"), 1, "dropout probability"),
                           (0.5, 2.5, "seed= must be an integer")):
        with pytest.raises(coda.LaunchError, match=match):
            prog(a, b, p=p, seed=seed, backend="triton")
    assert len(prog._plans) == 1


def test_output_names_that_are_not_a_collection_are_a_launch_error():
    """outputs= and unfinished= that cannot be iterated (a bare number) are named in a
    LaunchError, as a string or a non-string name is, not a TypeError from iterating them."""
    prog = coda.compile("EPILOGUE() { output = input; s = row_sum(input); }")
    for option in ("outputs", "unfinished"):
        assert "takes a list of output names, got 3" in _launch_error(prog, *_ab(), **{option: 3})
