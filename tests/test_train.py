"""`coda train` / `python -m coda.train`: the training demo end to end on a CPU, and its pieces.

The demo runs on the reference backend on a CPU (TRITON_INTERPRET unset or 0): conftest.py switches
the interpreter on for the kernel tests, so these tests switch it off again while they run.
"""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from coda import cli, train

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def reference_backend(monkeypatch):
    """CODA's reference backend for CPU tensors (TRITON_INTERPRET=0 at launch). Triton is imported
    first, in this session's mode: it fixes its interpreter mode when first imported (the
    optimizer's step imports it), and later kernel tests in this process need the interpreter."""
    import triton  # noqa: F401

    monkeypatch.setenv("TRITON_INTERPRET", "0")


def test_coda_train_end_to_end(tmp_path, capsys, reference_backend):
    out = tmp_path / "curves" / "loss.png"
    code = cli.main(["train", "--steps", "3", "--preset", "tiny", "--out", str(out), "--sample", "16"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert out.read_bytes().startswith(PNG)
    assert "reference backend" in printed
    assert "step 3/3" in printed
    assert "held-out loss" in printed and "continuation" in printed
    held_out = float(printed.split("held-out loss ")[1].split(",")[0])
    assert 4.0 < held_out < 6.0   # 3 steps from ln(256) = 5.55


def test_compare_trains_the_same_model_in_eager(tmp_path, capsys, reference_backend):
    code = cli.main(["train", "--steps", "2", "--batch-size", "4", "--compare", "--sample", "0",
                     "--out", str(tmp_path / "loss.png")])
    printed = capsys.readouterr().out
    assert code == 0, printed
    lines = {line.split(":")[0].strip(): line for line in printed.splitlines() if "final train loss" in line}
    assert lines.keys() == {"CODA", "eager"}
    # float32 on the reference backend: the two runs agree to rounding
    finals = [float(lines[k].split("final train loss ")[1].split(",")[0]) for k in ("CODA", "eager")]
    assert finals[0] == pytest.approx(finals[1], abs=1e-3)
    ratio = next(line for line in printed.splitlines() if line.startswith("CODA / eager throughput"))
    assert "the CPU path is for correctness, not speed" in ratio   # what the ratio measures


def test_python_m_coda_train(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-m", "coda.train", "--steps", "2", "--batch-size", "2",
                           "--sample", "0", "--out", str(tmp_path / "loss.png")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "loss.png").read_bytes().startswith(PNG)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is available")
def test_cuda_without_a_gpu_is_an_error(capsys):
    assert cli.main(["train", "--device", "cuda", "--steps", "1"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


@pytest.mark.parametrize("flag,value", [("--steps", "0"), ("--steps", "-5"), ("--batch-size", "0"),
                                        ("--lr", "0"), ("--lr", "-1"), ("--lr", "nan")])
def test_non_positive_numbers_are_usage_errors(capsys, monkeypatch, flag, value):
    """0 once meant "the preset's" (1500 steps instead of none); a negative lr was AdamW's traceback."""
    monkeypatch.setattr(train, "train", lambda *args, **kwargs: pytest.fail("trained anyway"))
    assert cli.main(["train", flag, value]) == 2
    assert f"argument {flag}: expected a positive" in capsys.readouterr().err


def test_negative_sample_is_a_usage_error(capsys, monkeypatch):
    """`--sample -5` silently meant "no sample"."""
    monkeypatch.setattr(train, "train", lambda *args, **kwargs: pytest.fail("trained anyway"))
    assert cli.main(["train", "--sample", "-5"]) == 2
    assert "argument --sample: expected a non-negative int, got '-5'" in capsys.readouterr().err


@pytest.mark.parametrize("device", ["meta", "mps"])
def test_devices_other_than_cpu_and_cuda_are_errors(capsys, monkeypatch, device):
    """`--device meta` trained, then failed with a traceback reading the first loss."""
    monkeypatch.setattr(train, "train", lambda *args, **kwargs: pytest.fail("trained anyway"))
    assert cli.main(["train", "--device", device]) == 2
    assert capsys.readouterr().err.strip() == f"coda: error: --device {device}: expected cpu or cuda[:N]"


def test_unwritable_out_fails_before_training(tmp_path, capsys, monkeypatch):
    """A bad --out is reported at once (exit 2, one line), not after the whole run."""
    monkeypatch.setattr(train, "train", lambda *args, **kwargs: pytest.fail("trained anyway"))
    blocker = tmp_path / "file"
    blocker.write_text("")
    for out in (blocker / "loss.png", tmp_path):   # a folder under a file; a folder itself
        assert cli.main(["train", "--steps", "1", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"coda: error: --out {out}: ") and err.count("\n") == 1, err
    assert train.main(["--steps", "1", "--out", str(blocker / "loss.png")]) == 2   # python -m coda.train
    assert "Traceback" not in capsys.readouterr().err


def test_out_that_only_opening_shows_unwritable_fails_before_training(capsys, monkeypatch):
    """A folder that exists but takes no new file (/proc): os.access says yes to root, so the run
    trained and then failed writing the plot; the check now opens the file."""
    monkeypatch.setattr(train, "train", lambda *args, **kwargs: pytest.fail("trained anyway"))
    assert cli.main(["train", "--steps", "1", "--out", "/proc/coda_loss.png"]) == 2
    assert capsys.readouterr().err.startswith("coda: error: --out /proc/coda_loss.png: not writable (")


def test_the_sample_is_printable_ascii():
    """A barely trained model emits bytes past ASCII and control bytes: printed as U+FFFD they
    crashed the run (after training, before the plot) where stdout's encoding is not UTF-8."""
    text = train.printable(b"In the\tbeginning\x1b[31m\r\xff\n.")
    assert text == "In the\\x09beginning\\x1b[31m\\x0d\\xff\n."
    assert text.isascii() and all(c == "\n" or c.isprintable() for c in text)


def test_rates_below_a_thousand_show_their_digits():
    """The interpreter's few tokens a second were printed as "0.0k tokens/s"."""
    rates = [train.rate(r) for r in (42.5, 999.4, 12345.0)]
    assert rates == ["42.5 tokens/s", "999 tokens/s", "12.3k tokens/s"]


def test_out_is_written_exactly_where_said(tmp_path, capsys, reference_backend):
    """Whatever its suffix, --out gets the PNG at that very path (matplotlib would append ".png"
    to a bare name and reject an unknown suffix with a traceback)."""
    for name in ("curves", "curves.txt"):
        assert cli.main(["train", "--steps", "1", "--batch-size", "2", "--sample", "0",
                         "--out", str(tmp_path / name)]) == 0
        assert (tmp_path / name).read_bytes().startswith(PNG)
        assert f"loss curve: {tmp_path / name}" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves", "curves.txt"]


def test_corpus_and_batches():
    corpus = train.load_corpus()
    assert corpus.dtype == torch.uint8 and len(corpus) == 4_404_412
    assert bytes(corpus[:22].tolist()) == b"Ge1:1 In the beginning"
    gen = torch.Generator().manual_seed(0)
    x, y = train.batch(corpus, 3, 8, gen, torch.device("cpu"))
    assert x.shape == y.shape == (3, 8) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    again = train.batch(corpus, 3, 8, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert torch.equal(again[0], x)   # one seed, one data order


def test_learning_rate_schedule():
    lrs = [train.learning_rate(s, 100, 1.0) for s in range(100)]
    assert lrs[0] == pytest.approx(0.2) and lrs[4] == pytest.approx(1.0)   # 5 warmup steps
    assert all(b <= a for a, b in itertools.pairwise(lrs[4:]))
    assert lrs[-1] == pytest.approx(0.1, abs=1e-3)
    assert math.isclose(train.learning_rate(0, 1, 2.0), 2.0)


def test_moving_average():
    assert train.moving_average([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]


def test_package_data_is_declared():
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert "data/*.gz" in pyproject and "matplotlib" in pyproject


def test_a_batch_that_does_not_fit_is_an_error_not_a_traceback(tmp_path, capsys, monkeypatch,
                                                                  reference_backend):
    """An allocation that fails while training (torch's CUDA OutOfMemoryError, its CPU allocator's
    RuntimeError, Python's MemoryError) exits with a message naming --batch-size; another error
    from inside the run is not mistaken for one."""
    failures = [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 52.00 GiB"),
                RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory: 52000000000 bytes"),
                MemoryError(),
                # sizes past int64 (--batch-size 2**63 - 1, 10**20: tracebacks, an audit's find)
                RuntimeError("Storage size calculation overflowed with sizes=[9223372036854775807, 1]"),
                TypeError("randint(): argument 'size' failed to unpack the object at pos 1 with error "
                          "\"Overflow when unpacking long long\"")]
    for failure in failures:
        def run_out(*args, failure=failure, **kwargs):
            raise failure
        monkeypatch.setattr(train, "train", run_out)
        argv = ["--steps", "1", "--batch-size", "123456", "--sample", "0", "--out", str(tmp_path / "c.png")]
        assert cli.main(["train", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("coda: error: --batch-size 123456: out of memory on cpu ("), err
        assert err.count("\n") == 1, err
        assert train.main(argv) == 2 and "Traceback" not in capsys.readouterr().err
    monkeypatch.setattr(train, "train", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["train", "--steps", "1", "--sample", "0", "--out", str(tmp_path / "c.png")])


def test_a_diverging_run_stops_with_an_error(tmp_path, capsys, reference_backend):
    """`--lr 1e30` made every loss NaN from step 2 on: the run went on to its last step and then
    ended in torch.multinomial's traceback while sampling. It stops at the first report."""
    argv = ["--steps", "40", "--batch-size", "2", "--lr", "1e30", "--sample", "5",
            "--out", str(tmp_path / "c.png")]
    assert cli.main(["train", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("coda: error: CODA: the training diverged (loss nan at step 2); "
                            "try a smaller --lr\n")
    assert "step 4/40" in captured.out and "step 8/40" not in captured.out   # stopped at its first report
    assert not (tmp_path / "c.png").exists()


@pytest.mark.parametrize("seed", [str(2**63), str(2**64 - 1), str(-2**63), "99999999999999999999999"])
def test_seeds_out_of_range_are_usage_errors(capsys, monkeypatch, seed):
    """torch seeds up to 2**64 - 1, and the held-out batches take seed + 1: `--seed 2**64 - 1`
    trained, then failed with a traceback; a larger seed failed before training. The range is
    now |seed| < 2**63, said in one line."""
    monkeypatch.setattr(train, "train", lambda *args, **kwargs: pytest.fail("trained anyway"))
    assert cli.main(["train", "--seed", seed]) == 2
    err = capsys.readouterr().err
    assert f"argument --seed: expected an integer seed, |seed| < 2**63, got '{seed}'" in err
    assert train.parse_seed(str(2**63 - 1)) == 2**63 - 1 and train.parse_seed("-5") == -5


def test_an_empty_device_is_an_error(capsys, monkeypatch):
    """`--device ''` silently meant the default device."""
    monkeypatch.setattr(train, "train", lambda *args, **kwargs: pytest.fail("trained anyway"))
    assert cli.main(["train", "--device", ""]) == 2
    assert capsys.readouterr().err.startswith("coda: error: --device : ")


def test_ctrl_c_is_a_line_and_exit_130(tmp_path, capsys, monkeypatch):
    """Ctrl-C during a run was a KeyboardInterrupt traceback."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(train, "train", interrupted)
    argv = ["--steps", "1", "--batch-size", "2", "--sample", "0", "--out", str(tmp_path / "c.png")]
    for main, args in ((cli.main, ["train", *argv]), (train.main, argv)):   # python -m coda.train too
        try:
            code = main(args)
        except KeyboardInterrupt:   # (uncaught, it would end the test session)
            pytest.fail("KeyboardInterrupt escaped")
        assert code == 130 and capsys.readouterr().err == "coda: interrupted\n"
