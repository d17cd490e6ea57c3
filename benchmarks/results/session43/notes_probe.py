"""GPT-2's training step with and without the column sums that LayerNorm's one-pass backward
notes for the op before it (fc2's and the out projection's bias gradients from the norm's dx
sums, `coda.ops.common.known_column_sums`), in one process: two models from one initialization,
each step captured as a CUDA graph, replayed in alternating rounds (the fortieth session's
ln_linear_probe.step_timing), then one profiled replay of each: the kernels that differ.
"no notes" is the build before: the consumers find no sums (and sum in their GEMMs); its norms
still sum their dx (a few µs), so the ratio slightly understates the change.
Run: python benchmarks/results/session43/notes_probe.py"""

import contextlib
import importlib
import sys
from pathlib import Path

import torch

here = Path(__file__).resolve().parent
sys.path[:0] = [str(here.parent / "session40"), str(here.parents[1])]
import ln_linear_probe as probe  # noqa: E402

from coda.ops import norms  # noqa: E402


@contextlib.contextmanager
def no_notes():
    """Inside: the ops before the norms find no noted sums."""
    linear = importlib.import_module("coda.ops.linear")   # coda.ops.linear is also a function
    with probe.patched(linear, "known_column_sums", lambda t, dtype: None), \
            probe.patched(norms, "known_column_sums", lambda t, dtype: None):
        yield


probe.FORMS = {"notes": contextlib.nullcontext, "no notes": no_notes}


def profiled(steps: dict) -> None:
    """µs of each kernel in one replay of each form's step, where the two differ by ≥ 1 µs."""
    per_form = {}
    for name, (captured, inputs) in steps.items():
        captured(**inputs)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            captured(**inputs)
            torch.cuda.synchronize()
        per_form[name] = {e.key[:90]: (e.device_time_total, e.count) for e in prof.key_averages()}
    a, b = per_form
    keys = sorted(set(per_form[a]) | set(per_form[b]),
                  key=lambda k: -abs(per_form[a].get(k, (0, 0))[0] - per_form[b].get(k, (0, 0))[0]))
    print(f"\nkernels whose time differs (µs, launches): {a} | {b}")
    for key in keys:
        (ta, ca), (tb, cb) = per_form[a].get(key, (0, 0)), per_form[b].get(key, (0, 0))
        if abs(ta - tb) >= 1.0:
            print(f"  {key:90s} {ta:9.1f} {ca:4d} | {tb:9.1f} {cb:4d}")
    print("  total:", ", ".join(f"{n} {sum(t for t, _ in v.values()):.1f}" for n, v in per_form.items()))


if __name__ == "__main__":
    probe.step_timing(after=profiled)
