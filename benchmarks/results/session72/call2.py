"""Seventy-second session, call 2: this session's kernel changes on the GPU. m_limit / k_limit
read in the limit's width (cm.limited) in every mainloop (portable, Hopper TMA, ping-pong,
map), int32 and int64 limits, one past 2**31; Triton's neg as x * -1 and a -0.0 constant."""
import torch

import coda
from coda.codegen.tuning import Config

torch.manual_seed(0)
prog = coda.compile("EPILOGUE lim(b: col) { output = input + b; s = row_sum(input); c = col_sum(input); }")
configs = {"heuristic": None, "hopper": Config(128, 128, 64, 8, 3),
           "pingpong": Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True)}
failures = 0
for m, n, k, dtype in ((2048, 1024, 512, torch.bfloat16), (300, 200, 96, torch.float16)):
    a, w = torch.randn(m, k, device="cuda", dtype=dtype), torch.randn(n, k, device="cuda", dtype=dtype)
    bias = torch.randn(n, device="cuda", dtype=dtype)
    for label, config in configs.items():
        for limit in (0, 100, 2**31 - 1, 2**32 + 3, 2**63 - 1):
            for which in ("m_limit", "k_limit"):
                width = torch.int32 if limit < 2**31 else torch.int64
                lim = torch.tensor([limit], device="cuda", dtype=width)
                kwargs = {which: lim}
                try:
                    if config is None:
                        got = prog(a, w.T, b=bias, **kwargs)
                    else:
                        triton_prog = prog.triton
                        launch = prog.bind(a, w.T, b=bias, **kwargs)
                        plan = triton_prog.plan(launch, config)
                        limits = (launch.m_limit, launch.k_limit)
                        got = plan.run(a, w.T, launch.values, None, launch.seed, limits)
                    want = prog.reference(a.float(), w.T.float(), b=bias.float(), **kwargs)
                    rows = min(limit, m) if which == "m_limit" else m
                    diff = got["output"][:rows].float() - want["output"][:rows].float()
                    err = diff.abs().max().item() if rows else 0.0
                    serr = (got["s"][:rows] - want["s"][:rows]).abs().max().item() if rows else 0.0
                    scale = want["output"].float().abs().max().item() + 1
                    ok = err < 0.02 * scale and serr < 0.02 * (want["s"].abs().max().item() + 1)
                except Exception as e:
                    ok, err, serr = False, repr(e)[:200], ""
                failures += not ok
                if not ok or limit in (100, 2**63 - 1):
                    verdict = "ok" if ok else "FAIL"
                    print(f"{m}x{n}x{k} {dtype} {label:9s} {which}={limit}: {verdict} {err} {serr}")
z = torch.tensor([[0.0, -0.0, 2.0, -3.0]], device="cuda")
for expr in ("1.0 / -z", "1.0 / (0.0 - z)", "1.0 / (z + 0.0)", "1.0 / (z - -0.0)", "1.0 / (-0.0 - z)"):
    p = coda.compile(f"EPILOGUE (z: tile) {{ output = {expr}; }}")
    got = p.map(torch.ones(1, 4, device="cuda"), z=z)["output"].cpu()
    want = eval(expr, {"z": z.cpu()})
    ok = torch.equal(got, want)
    failures += not ok
    print(f"{expr:20s} gpu {got.tolist()} eager {want.tolist()} {'ok' if ok else 'FAIL'}")
print("failures:", failures)
