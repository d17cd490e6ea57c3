"""sm_90 compiles of the fast-path epilogues at 8192x4096x4096 in two-programs-per-SM configs."""
import sys
sys.path.insert(0, "tests/codegen")
import torch
import coda
from coda.codegen import kernel as kernel_module
from coda.codegen.tuning import Config
from test_hopper_compiles import PROGRAMS, compile_sm90
kernel_module._num_sms = lambda device: 132
m, n, k = 8192, 4096, 4096
configs = [Config(128, 128, 64, 4, 3, programs_per_sm=2), Config(128, 128, 64, 4, 3, split_epilogue=2, programs_per_sm=2),
           Config(128, 128, 64, 4, 2, split_epilogue=2, programs_per_sm=2),
           Config(128, 128, 64, 8, 3, split_epilogue=2, programs_per_sm=2),
           Config(128, 128, 64, 8, 3, programs_per_sm=2), Config(128, 256, 64, 8, 3, split_epilogue=2)]
for name in sys.argv[1].split(","):
    prog = coda.compile(PROGRAMS[name])
    operands = {"bias": torch.empty(n, dtype=torch.bfloat16), "residual": torch.empty(m, n, dtype=torch.bfloat16),
                "pre": torch.empty(m, n, dtype=torch.bfloat16), "rstd": torch.empty(m, dtype=torch.float32), "p": 0.1}
    launch = prog.bind(torch.empty(m, k, dtype=torch.bfloat16), torch.empty(n, k, dtype=torch.bfloat16).T,
                       seed=1, **{p: v for p, v in operands.items() if p in prog.ir.params})
    for config in configs:
        built = prog.triton._build(kernel_module._signature(launch, "hopper"), "hopper")
        f = compile_sm90(kernel_module, built, config, launch)
        res = 2 * (f["shared"] + 1024) <= 233472 and 2 * f["registers"] * config.num_warps * 32 <= 65536
        print(name, config.block_m, config.block_n, config.num_warps, config.num_stages, config.split_epilogue,
              config.programs_per_sm, f["shared"], f["registers"], f["spilled"], "resident2" if res else "", flush=True)
