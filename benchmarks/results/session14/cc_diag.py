"""Where torch.compile of a CODA-patched HF model (BERT by default) spends its warm-up on the GPU:
the main thread's stack printed every 20 s (torch and coda frames with line numbers, the
last 24 outside the IR printing: Inductor's ir.py __str__ chain and sympy's printer are
summarized as their depth) from a sampling
thread, each of three steps timed, Inductor's compile times and Dynamo's counters at the end.

    python benchmarks/results/session14/cc_diag.py [bert|gpt2|llama]   (from the repository root)
"""
import os
import sys
import threading
import time
import traceback

sys.path.insert(0, "benchmarks")
import torch
import train as T
from torch._dynamo.utils import compile_times, counters

name = sys.argv[1] if len(sys.argv) > 1 else "bert"
t0 = time.perf_counter()
dev = torch.device("cuda")
model = T.build(name, False, dev, torch.bfloat16)
step_model = T.prepare(model, "coda+compile")
opt = torch.optim.AdamW(model.parameters(), lr=T.LR, fused=True)
b, s = T.SHAPES[name]
gen = torch.Generator().manual_seed(0)
vocab = model.config.vocab_size
inputs = T.model_inputs(name, torch.randint(vocab, (b, s), generator=gen), vocab, gen, dev)
print(f"built in {time.perf_counter() - t0:.1f} s", flush=True)
main = threading.main_thread().ident


def sample() -> None:
    while True:
        time.sleep(20)
        frames = traceback.extract_stack(sys._current_frames()[main])
        printing = [f for f in frames if (f.filename.endswith("_inductor/ir.py") and "str" in f.name)
                    or "sympy" in f.filename]
        outer = [f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}" for f in frames
                 if ("torch" in f.filename or "coda" in f.filename) and f not in printing]
        print(f"[{time.perf_counter() - t0:.0f} s] " + " > ".join(outer[-24:])
              + f" > ({len(printing)} frames printing IR)", file=sys.stderr, flush=True)


threading.Thread(target=sample, daemon=True).start()
for i in range(3):
    t = time.perf_counter()
    loss = step_model(**inputs).loss
    torch.cuda.synchronize()
    tf = time.perf_counter()
    loss.backward()
    torch.cuda.synchronize()
    tb = time.perf_counter()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print(f"step {i}: forward {tf - t:.1f} s, backward {tb - tf:.1f} s, loss {loss.item():.4f}", flush=True)
print(compile_times())
print({k: dict(v) for k, v in counters.items() if k in ("graph_break", "stats", "recompiles")})
