"""What a launch does when its first run (compile, tune) happens inside CUDA-graph capture.

Three cases, each in a fresh process-wide state (a new program, CODA_CACHE_DIR empty):
  tune+compile: CODA_AUTOTUNE=1, the program's first launch inside capture;
  compile:      CODA_AUTOTUNE=0, the first launch inside capture (Triton compiles there);
  tune:         CODA_AUTOTUNE=1, the kernel built at another shape, a new shape inside capture.
Each prints what the capture raised (type, first line) or whether the replay is right.
    python benchmarks/results/session68/capture_probe.py CASE
"""

import os
import sys
import tempfile
import traceback

case = sys.argv[1]
os.environ["CODA_CACHE_DIR"] = tempfile.mkdtemp()
os.environ["CODA_AUTOTUNE"] = "0" if case == "compile" else "1"
import torch  # noqa: E402

import coda  # noqa: E402

prog = coda.compile(f"EPILOGUE(bias: col) {{ output = gelu(input + bias) * {len(case)}.0; }}")
m, n, k = 1024, 1536, 2048
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
if case == "tune":
    prog(torch.randn(4096, k, device="cuda", dtype=torch.bfloat16), w.T, bias=bias)
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
graph = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(graph):
        out = prog(a, w.T, bias=bias)["output"]
except Exception as err:
    print(f"{case}: capture raised {type(err).__module__}.{type(err).__name__}: "
          f"{(str(err).strip().splitlines() or [''])[0][:300]}")
    traceback.print_exc(limit=-4)
    try:
        torch.cuda.synchronize()
        again = prog(a, w.T, bias=bias)["output"]
        print(f"{case}: after it, an eager launch works: {again.shape}")
    except Exception as err2:
        print(f"{case}: after it, an eager launch raised {type(err2).__name__}: {str(err2)[:200]}")
    sys.exit(0)
graph.replay()
torch.cuda.synchronize()
want = prog.reference(a.float(), w.T.float(), bias=bias.float())["output"]
err = ((out.float() - want).abs().max() / want.abs().max()).item()
print(f"{case}: captured and replayed, max relative error {err:.2e}")
