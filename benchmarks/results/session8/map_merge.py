"""GPU experiment of the eighth session: the cross-entropy's gradient map by row stride and map
template, and the log-sum-exp merge, at GPT-2's vocabulary. Run from the repository root with
`PYTHONPATH=src python benchmarks/results/session8/map_merge.py`; it wrote run2/map_merge.log."""
import json
import os

import torch
import triton.testing as tt

from coda.codegen import mainloops
from coda.codegen.finish import finish

res = {}
rows, V = 2560, 50257
# the map template before this session: every load and store masked on rows and columns
OLD_MAP = mainloops.MAP.split("    x = X +")[0] + '''    inside = (rows < M)[:, None] & (cols < N)[None, :]
    acc = tl.load(X + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=inside, other=0.0)
    epilogue(acc.to(tl.float32), pid_m, pid_n, M, N, seed{EPILOGUE_ARGS}, BLOCK_M, BLOCK_N)
'''
def bench(f):
    return tt.do_bench(f, warmup=25, rep=100, return_mode="median")
g = torch.Generator(device="cuda").manual_seed(0)
target = torch.randint(0, V, (rows,), device="cuda", generator=g).float()
lse = torch.full((rows,), 12.0, device="cuda")
alpha = torch.full((rows,), 1 / 16384, device="cuda")
for template in ("new", "old"):
    mainloops.MAINLOOPS["map"] = mainloops.MAP if template == "new" else OLD_MAP
    from coda.ops import cross_entropy as ce
    ce.grad_program.cache_clear()
    prog = ce.grad_program(False, False, False)
    for stride in (50264, 50272, 50288, 50304):
        buf = torch.randn(rows * stride, device="cuda", generator=g).to(torch.bfloat16)
        out = buf.view(rows, stride)[:, :V]
        ops = dict(target=target, offset=0.0, lse=lse, alpha=alpha, hit=1.0, smooth=0.0)
        ms = bench(lambda: prog.map(out, out=out, **ops))
        res[f"map_{template}_stride{stride}"] = ms
        print(f"grad map {template} stride {stride}: {ms*1e3:.1f} us  {rows*V*4/ms/1e9:.2f} TB/s", flush=True)
src = torch.randn(rows, 50272, device="cuda").to(torch.bfloat16)[:, :V]
dst = torch.empty_like(src)
ms = res["torch_copy"] = bench(lambda: dst.copy_(src))
print(f"torch copy of the view: {ms*1e3:.1f} us  {rows*V*4/ms/1e9:.2f} TB/s")
for parts, n in ((1571, 2560), (1571, 1280), (250, 4096), (24, 16384), (96, 16384)):
    m = torch.randn(parts, n, device="cuda") * 3
    s = torch.rand(parts, n, device="cuda") * 10 + 1
    o = torch.empty(n, device="cuda")
    ms = bench(lambda: finish("row_logsumexp", (m, s), o))
    want = torch.logsumexp(m.double() + s.double().log(), 0)
    err = ((o.double() - want).abs().max()).item()
    ms_t = bench(lambda: torch.logsumexp(m + s.log(), 0))
    res[f"merge_{parts}x{n}"] = [ms, ms_t, err]
    print(f"lse merge {parts}x{n}: {ms*1e3:.1f} us (torch logsumexp of m+log s: {ms_t*1e3:.1f} us), "
          f"max err {err:.2e}")
    ms = res[f"sum_{parts}x{n}"] = bench(lambda: torch.sum(m, 0, out=o))
    print(f"  torch.sum dim 0 {parts}x{n}: {ms*1e3:.1f} us")
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "map_merge.json"), "w"), indent=1)
