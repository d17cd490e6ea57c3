"""codegen/kernel.py: the key of launch_cached's direct launchers separates every argument
difference Triton compiles a separate kernel for (on the CPU the interpreter runs each launch
through Triton itself, so the cache is filled only on a GPU: tests/gpu covers the launches); the
generated kernel's source file; which tensors TMA reads; how float32 operands meet the tensor
cores; the allocator of a direct launcher's launches through Triton's own launcher."""

from __future__ import annotations

import torch

from coda.codegen.kernel import _specialization, _tma_ok


def test_the_key_separates_what_triton_specializes_on():
    base = torch.zeros(64, dtype=torch.float16)
    aligned, misaligned = base[:16], base[1:17]
    assert _specialization(aligned) != _specialization(misaligned)           # 16-byte alignment
    assert _specialization(aligned) != _specialization(aligned.float())      # dtype
    assert _specialization(768) == _specialization(1024)                     # both multiples of 16
    assert len({_specialization(v) for v in (1, 768, 770, 2**31)}) == 4      # 1, %16, other, 64-bit
    assert _specialization(1e-5) == _specialization(0.5)


def test_tma_reads_dense_rows_not_expanded_views():
    """A tensor map's strides step over whole rows: an expanded view (stride 0, a vector
    broadcast to a tile) is read through pointers instead."""
    base = torch.zeros(64, 32, dtype=torch.float16)
    assert _tma_ok(base, row_major=True) and _tma_ok(base.T)
    assert not _tma_ok(base[0].expand(64, 32), row_major=True)
    assert not _tma_ok(torch.zeros(64, dtype=torch.float16)[:, None].expand(64, 32))   # strides (1, 0)
    assert not _tma_ok(base[:, 1:17])                  # 2 bytes past a 16-byte boundary


def test_launches_run_through_triton_under_the_interpreter():
    """Without a compiled CUDA kernel nothing is cached: each launch is Triton's own."""
    import triton
    import triton.language as tl

    from coda.codegen import kernel

    @triton.jit
    def twice(X, Y, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(Y + i, 2 * tl.load(X + i, mask=i < n), mask=i < n)

    x = torch.randn(10)
    for _ in range(2):
        y = torch.full_like(x, float("nan"))
        kernel.launch_cached(twice, (1,), [x, y, 10], dict(BLOCK=16), x.device)
        torch.testing.assert_close(y, 2 * x)
    assert not any(key[0] is twice for key in kernel._DIRECT)


def test_direct_launchers_are_bounded_when_grids_keep_changing(monkeypatch):
    """A grid per row count (a sequence length per batch) would grow the cache without end:
    past MAX_DIRECT it starts over, and every launch still runs its kernel."""
    from coda.codegen import kernel

    ran = []

    def compiled(fn, grid, args, meta, device):   # Triton's first launch runs the kernel too
        ran.append(grid)
        return None, lambda *args: ran.append(grid)

    monkeypatch.setattr(kernel, "first_launch", compiled)
    monkeypatch.setattr(kernel, "_DIRECT", {})
    fn = type("Kernel", (), {"arg_names": ["n"]})()
    for rows in range(3 * kernel.MAX_DIRECT):
        kernel.launch_cached(fn, (rows,), [rows], {}, torch.device("cpu"))
        kernel.launch_cached(fn, (rows,), [rows], {}, torch.device("cpu"))
        assert len(kernel._DIRECT) <= kernel.MAX_DIRECT
    assert ran == [(rows,) for rows in range(3 * kernel.MAX_DIRECT) for _ in range(2)]


def test_an_unwritable_cache_directory_falls_back_to_a_temporary_one(monkeypatch, tmp_path):
    """Generated kernel source must live in a file (Triton reads it from there): with the cache
    directory unwritable the launch still runs, from a temporary directory, and says so once."""
    import pytest

    import coda
    from coda.codegen import kernel

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("CODA_CACHE_DIR", str(blocker / "cache"))   # below a file: never writable
    monkeypatch.setattr(kernel, "_fallback_dir", None)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a, b = torch.randn(8, 4, device=device), torch.randn(4, 8, device=device)
    prog = coda.compile("output = input * 3.0;")
    with pytest.warns(UserWarning, match="cannot write its kernel cache"):
        out = prog(a, b, backend="triton")["output"]
    assert torch.allclose(out, 3 * a @ b, atol=1e-5)
    assert kernel._fallback_dir is not None and any(kernel._fallback_dir.iterdir())


def test_a_damaged_kernel_file_in_the_cache_is_written_again(monkeypatch, tmp_path):
    """A kernel file cut short (a crash while it was written) or emptied is replaced by the
    source the launch generated: the program runs, where it had failed with a raw
    IndentationError or AttributeError in this and every later process."""
    import coda

    monkeypatch.setenv("CODA_CACHE_DIR", str(tmp_path))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a, b = torch.randn(8, 4, device=device), torch.randn(4, 8, device=device)
    text = "EPILOGUE damaged_cache_test() { output = input * 3.0; }"
    coda.compile(text)(a, b, backend="triton")
    files = sorted((tmp_path / "kernels").glob("damaged_cache_test_*.py"))
    assert files
    for damage in (lambda t: t[: len(t) // 2], lambda t: ""):
        for f in files:
            f.write_text(damage(f.read_text()))
        out = coda.compile(text)(a, b, backend="triton")["output"]   # a new program: builds again
        assert torch.allclose(out, 3 * a @ b, atol=1e-5)


def test_float32_dots_follow_torchs_matmul_precision():
    """The portable kernel takes float32 operands as torch's own float32 matmuls do: 3xTF32
    under "highest" (PyTorch's default), one TF32 MMA under "high"; a launch after the setting
    changes gets a plan of its own (the interpreter computes both exactly: the GPU tests hold
    the accuracy, tests/examples/test_layer_scale.py)."""
    import coda
    from coda.codegen import kernel

    prog = coda.compile("output = input;")
    a, b = torch.randn(32, 16), torch.randn(16, 24)
    before = torch.get_float32_matmul_precision()
    try:
        for setting in ("highest", "high", "highest"):
            torch.set_float32_matmul_precision(setting)
            out = torch.full((32, 24), float("nan"))
            prog(a, b, backend="triton", out=out)
            torch.testing.assert_close(out, a @ b)
    finally:
        torch.set_float32_matmul_precision(before)
    assert sorted(plan.meta["DOT_PRECISION"] for plan in prog._plans.values()) == ["tf32", "tf32x3"]
    assert kernel.dot_precision(torch.float16) == "tf32"


def test_a_kernel_writing_out_counts_as_an_in_place_change():
    """A kernel writes `out=` through its pointer, which autograd does not see: the launch bumps
    out's version counter, as the reference backend's copy does, so a tensor that a graph saved
    and a launch then overwrote fails loudly at backward instead of giving a wrong gradient (a
    first launch and a cached one, also an in-place map)."""
    import pytest

    import coda

    prog = coda.compile("output = input;")
    a, b = torch.randn(8, 4), torch.eye(4, 8)
    for _ in range(2):   # the second launch takes the cached plan
        x = torch.randn(8, 8, requires_grad=True)
        h = x * 1.0
        loss = (h * h).sum()   # saves h
        before = h._version
        prog(a, b, backend="triton", out=h.detach())
        assert h._version > before
        torch.testing.assert_close(h.detach(), a @ b)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()
    y = torch.randn(8, 8)
    before = y._version
    prog.map(y, backend="triton", out=y)
    assert y._version > before


def test_a_direct_launch_through_tritons_own_launcher_sets_the_allocator_of_its_thread(monkeypatch):
    """While a profiler's launch hooks are set, a Plan's cached launches go through Triton's own
    launcher, which takes a Hopper kernel's TMA scratch from Triton's allocator: that is kept
    per thread, and such a launch may come from another thread than the first one (autograd's
    backward), where none was set."""
    import threading
    from types import SimpleNamespace

    from triton import knobs
    from triton.runtime import _allocation

    from coda.codegen import kernel

    allocators = []

    class Compiled:   # what direct_launcher reads of a compiled kernel
        run = SimpleNamespace(profile_scratch_size=0, global_scratch_size=128, num_ctas=1, launch=None,
                              launch_cooperative_grid=False, launch_pdl=False)
        function = packed_metadata = None

        def __getitem__(self, grid):
            return lambda *args: allocators.append(_allocation._allocator.get())

    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0, raising=False)
    launcher = kernel.direct_launcher(Compiled(), (2,), torch.device("cuda", 0))
    hook = lambda *args: None   # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        thread = threading.Thread(target=launcher, args=(1,))
        thread.start()
        thread.join()
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert len(allocators) == 1 and allocators[0] is not _allocation._NULL_ALLOCATOR


def test_a_program_of_any_name_length_gets_a_kernel_file(monkeypatch, tmp_path):
    """The source file was named after the whole program name: from about 205 characters the
    file system refused it (a LaunchError blaming the cache directory, after a warning)."""
    import warnings

    import coda

    monkeypatch.setenv("CODA_CACHE_DIR", str(tmp_path))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a, b = torch.randn(8, 4, device=device), torch.randn(4, 8, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)   # no fallback to a temporary directory either
        out = coda.compile(f"EPILOGUE {'f' * 300}() {{ output = input * 3.0; }}")(a, b, backend="triton")
    assert torch.allclose(out["output"], 3 * a @ b, atol=1e-5)
    assert [len(f.name) for f in (tmp_path / "kernels").glob("fff*.py")] == [80 + 1 + 20 + 3]
