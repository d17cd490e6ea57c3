"""Twenty-fourth session: linear_cross_entropy with skip_ignored (the rows whose target is
ignore_index cost no GEMM work) against without, forward + backward, µs per call from CUDA
graphs of 5 calls (median of 5 replays), each case timed twice, interleaved:
  BERT's masked-LM head  16384 x 768 -> 30522 (+ bias), 15% of the rows labelled
  GPT-2's LM head        16384 x 768 -> 50257, every row but the last of each 1024 labelled,
                         and with half of the rows labelled (`gpt2_lm_head_half`)
and eager PyTorch's unfused head (F.linear + F.cross_entropy) beside them. Writes
$OUT/skip_probe.json (or ./skip_probe.json). Arguments: the cases to run (default all).
"""

import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernel_configs import graph_us  # benchmarks/kernel_configs.py

from coda.ops.cross_entropy import linear_cross_entropy

REPS = 5
DT = torch.bfloat16


def case(tokens: int, hidden: int, vocab: int, bias: bool, labelled: float, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(tokens, hidden, device="cuda", generator=g).to(DT).requires_grad_()
    w = (torch.randn(vocab, hidden, device="cuda", generator=g) / hidden**0.5).to(DT).requires_grad_()
    b = (torch.randn(vocab, device="cuda", generator=g) * 0.1).to(DT).requires_grad_() if bias else None
    target = torch.randint(0, vocab, (tokens,), device="cuda", generator=g)
    if labelled < 1.0:
        target[torch.rand(tokens, device="cuda", generator=g) >= labelled] = -100
    else:
        target[1023::1024] = -100
    leaves = [t for t in (x, w, b) if t is not None]

    def coda(skip: bool):
        return lambda: torch.autograd.grad(
            linear_cross_entropy(x, w, target, bias=b, skip_ignored=skip), leaves)

    def eager():
        return torch.autograd.grad(F.cross_entropy(F.linear(x, w, b).float(), target), leaves)

    return {"coda": coda(False), "coda_skip": coda(True), "eager": eager}


def main() -> None:
    results = {"gpu": torch.cuda.get_device_name(), "reps": REPS, "cases": {}}
    cases = {"bert_mlm_head": (16384, 768, 30522, True, 0.15),
             "gpt2_lm_head": (16384, 768, 50257, False, 1.0),
             "gpt2_lm_head_half": (16384, 768, 50257, False, 0.5)}   # call 4: a fine-tuning batch
    for name, shape in cases.items():
        if sys.argv[1:] and name not in sys.argv[1:]:
            continue
        fns = case(*shape, seed=len(name))
        times = {k: [] for k in fns}
        for _ in range(2):
            for label, fn in fns.items():
                times[label].append(round(graph_us(fn, REPS), 1))
        results["cases"][name] = {"shape": shape, "us": times}
        print(name, times, flush=True)
    out = Path(os.environ.get("OUT", ".")) / "skip_probe.json"
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
