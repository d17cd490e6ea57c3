"""Launch configurations of CODA's kernels in training, timed one by one from CUDA graphs.

    python benchmarks/kernel_configs.py maps  [--json benchmarks/results/session10/map_tiles.json]
    python benchmarks/kernel_configs.py llama [--json benchmarks/results/session10/llama_configs.json]
    python benchmarks/kernel_configs.py gpt2  [--json benchmarks/results/session27/gpt2_configs.json]
    python benchmarks/kernel_configs.py sm90  [--json ...]     # no GPU needed


`maps`: the map programs of GPT-2, BERT and LLaMA training (bias-gradient column sums, the norms'
gradient maps, ...) at 16384 rows, in several map tiles; the finishing kernel is part of each
launch. `llama`: the heaviest CODA GEMMs of a LLaMA-492M step (16384 tokens) in the heuristic
configuration and in other Hopper candidates (a configuration that does not fit shared memory is
recorded as "OOR"), cuBLAS beside the plain ones. `gpt2`: every CODA GEMM launch of one GPT-2 124M
training step (batch 16 x 1024, recorded from the patched HF model as it runs), in the heuristic
configuration and in GPT2_CONFIGS, with cuBLAS's bare GEMM of the same A and B beside each and
CODA's plain GEMM of them in the heuristic's configuration (what the epilogue costs). `sm90`: the
same LLaMA launches compiled for sm_90 on any machine, every Hopper candidate: shared memory (over
232448 bytes: does not fit), registers a thread and spilled bytes (ptxas -v). Each launch is a
ready `Plan` captured ten or twenty times in a CUDA graph and replayed: device time only, no host
cost. bf16 operands on the GPU; `--smoke` runs tiny float32 shapes once each on the CPU (Triton
interpreter), untimed, to check the script. These tables chose `tuning.MAP_CONFIGS` and the Hopper
heuristic's last-wave rule (docs/benchmarks-log.md and docs/performance.md, tenth session)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

if "--smoke" in sys.argv and "sm90" not in sys.argv:   # sm90 compiles: no interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")   # before Triton is imported

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import side_by_side  # benchmarks/, beside this script

import coda
from coda.codegen.kernel import Plan
from coda.codegen.tuning import Config
from coda.errors import LaunchError
from coda.integrations.hf import unpadded_batches
from coda.ops.common import ACCUMULATE, PLAIN, SUMS

norms = importlib.import_module("coda.ops.norms")        # coda.ops.<name> is also a function
linear = importlib.import_module("coda.ops.linear")
gated = importlib.import_module("coda.ops.gated_mlp")
layer_norm = importlib.import_module("coda.nn.layer_norm")

MAP_TILES = [Config(bm, bn, 0, num_warps=w) for bm, bn, w in (
    (32, 128, 4), (64, 128, 4), (64, 128, 8), (128, 128, 8), (32, 256, 4), (64, 256, 8), (16, 256, 4),
    (16, 512, 4), (32, 512, 8), (16, 1024, 8), (128, 64, 4), (256, 64, 8), (64, 64, 4))]
GEMM_CONFIGS = [None, Config(128, 256, 64, 8, 4, split_epilogue=2),
                Config(128, 256, 64, 8, 3, split_epilogue=4),
                Config(128, 128, 64, 8, 4), Config(128, 128, 64, 8, 4, split_epilogue=2),
                Config(128, 128, 64, 4, 4, split_epilogue=4, pingpong=True),
                Config(128, 128, 64, 4, 3, split_epilogue=2, pingpong=True),
                Config(128, 128, 64, 4, 5, split_epilogue=4, pingpong=True),
                # staged tile operands in 8 slices: the SwiGLU gradient's g and u fit beside a
                # 3-deep ring (229 720 B) and spill 144 B a thread (816 B in 4 slices, 10 KB in 2;
                # sm_90 compiles, fifteenth session): 1428 us against the heuristic's 810 (sixteenth)
                Config(128, 128, 64, 4, 3, split_epilogue=8, pingpong=True),
                # the ping-pong kernel with its epilogue loading the tile operands itself (in
                # narrow slices: a whole tile's accumulator stays live while they load)
                Config(128, 128, 64, 4, 4, split_epilogue=4, pingpong=True, stage_tiles=False),
                Config(128, 128, 64, 4, 4, split_epilogue=8, pingpong=True, stage_tiles=False),
                Config(128, 128, 64, 4, 5, split_epilogue=8, pingpong=True, stage_tiles=False),
                Config(128, 128, 64, 4, 3, split_epilogue=8, pingpong=True, stage_tiles=False),
                # the warpgroups' staged operands in one set of buffers (the packed default since
                # the fifty-sixth session): room for a deeper ring
                Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True, share_tiles=True),
                Config(128, 128, 64, 4, 5, split_epilogue=4, pingpong=True, share_tiles=True)]
#: GPT-2's launches: the Triton kernel's tiles and the ping-pong kernel's rings and slices
GPT2_CONFIGS = [None, Config(128, 256, 64, 8, 3, split_epilogue=2), Config(128, 128, 64, 8, 4),
                *(Config(128, 128, 64, 4, ring, split_epilogue=slices, pingpong=True)
                  for ring in (4, 5, 6) for slices in (2, 4))]


class Setup:
    """Shapes and tensors: the real ones on the GPU, tiny float32 ones for `--smoke`."""

    def __init__(self, smoke: bool, bf16: bool = False, cases: str | None = None,
                 configs: str | None = None):
        """bf16: bfloat16 tensors at the real shapes on the CPU, only to be compiled (`sm90`);
        cases: the llama_launches to run (default all); configs: only the configurations whose
        label contains this (the heuristic's always runs)."""
        self.smoke, self.cases = smoke, None if cases is None else cases.split(",")
        self.configs = configs
        self.device = "cpu" if smoke or bf16 else "cuda"
        self.dtype = torch.float32 if smoke and not bf16 else torch.bfloat16
        self.m = 64 if smoke else 16384

    def chosen(self, configs: list) -> list:
        return [c for c in configs if c is None or self.configs is None or self.configs in config_label(c)]

    def tile(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=self.device, dtype=self.dtype)

    def row(self) -> torch.Tensor:
        return torch.rand(self.m, device=self.device) + 0.5


def config_label(config: Config) -> str:
    """e.g. `triton128x128s4e2`: mainloop, tile, ring depth, epilogue slices; `g`: the
    ping-pong epilogue loads its tile operands itself, `r`: stores its outputs from registers,
    `x`: its warpgroups share one set of tile-operand buffers."""
    return (f"{'pingpong' if config.pingpong else 'triton'}{config.block_m}x{config.block_n}"
            f"s{config.num_stages}e{config.split_epilogue}{'' if config.stage_tiles else 'g'}"
            f"{'' if config.stage_outputs else 'r'}{'x' if config.share_tiles else ''}")


def agrees(got: dict[str, torch.Tensor], first: dict[str, torch.Tensor]) -> bool:
    """Whether one configuration's outputs are the first's, within bf16 rounding of the sums."""
    return all(torch.allclose(got[k].float(), first[k].float(), rtol=2e-2, atol=2e-2, equal_nan=True)
               for k in first)


def graph_time(fn: Callable[[], object], setup: Setup, reps: int) -> float:
    """`graph_us`, or one untimed call under --smoke."""
    if setup.smoke:
        fn()
        return 0.0
    return graph_us(fn, reps)


def graph_us(fn: Callable[[], object], reps: int) -> float:
    """µs per call: the median of 5 replays of a CUDA graph of `reps` calls (two calls first,
    on a side stream, build what the calls build once)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / reps)
    return sorted(times)[2]


def map_operands(prog, n: int, setup: Setup) -> dict:
    """Random operands of a map program by their declared kinds (positive statistics)."""
    values = {}
    for p in prog.ir.params.values():
        if p.kind == "row":
            values[p.name] = setup.row() * (n if p.name == "ss" else 1)
        elif p.kind == "col":
            values[p.name] = setup.tile(n)
        elif p.kind == "tile":
            values[p.name] = setup.tile(setup.m, n)
        elif p.kind == "scalar":
            values[p.name] = {"inv_n": 1.0 / n, "eps": 1e-5, "p": 0.1}.get(p.name, 0.5)
    return values


def maps(setup: Setup) -> list[dict]:
    """Each map of training in every tile of MAP_TILES; the results must agree across tiles."""
    cases = [("col_sum", SUMS, 768, ["cols"]), ("col_sum", SUMS, 2304, ["cols"]),
             ("col_sum", SUMS, 3072, ["cols"]), ("col_sum", SUMS, 2048, ["cols"]),
             ("ln_grad_sums", layer_norm.LN_GRAD_SUMS, 768, ["a", "b", "dg", "dbeta"]),
             ("ln_grad_dx", layer_norm.LN_GRAD_DX[False], 768, None),
             ("layer_norm", layer_norm.LAYER_NORM, 768, None),
             ("ln_dx", norms.LN_DX[False], 768, ["output", "xhat"]),
             ("ln_stats", norms.LN_STATS, 768, ["s", "ss"]),
             ("rms_dx", norms.RMS_DX[False], 2048, ["output", "xn"]),
             ("scale_rows", norms.SCALE_ROWS, 2048, None),
             ("gelu_erf_grad+db", linear.backward_program("gelu_erf", False, True), 3072, None),
             ("dropout_grad+db", norms.DROPOUT_GRAD, 768, None)]
    rows = []
    for name, prog, n, outputs in cases:
        n = 48 if setup.smoke else n
        x = setup.tile(setup.m, n)
        launch = prog.bind(x, None, seed=1, **map_operands(prog, n, setup),
                           **({"outputs": outputs} if outputs else {}))
        kernel = prog.triton.kernel(launch)
        row, first = {"case": name, "n": n}, None
        for config in MAP_TILES:
            plan = Plan(kernel, config, launch)
            out = plan.run(launch.a, None, launch.values, None, launch.seed)
            first = first or out
            same = agrees(out, first)
            us = graph_time(lambda: plan.run(launch.a, None, launch.values, None, launch.seed), setup, 20)
            label = f"{config.block_m}x{config.block_n}w{config.num_warps}"
            row[label] = round(us, 2) if same else f"WRONG {us:.1f}"
        if name == "col_sum":
            row["torch.sum"] = round(graph_time(lambda: x.sum(0, dtype=torch.float32), setup, 20), 2)
        rows.append(row)
        print(row, flush=True)
    return rows


def llama_launches(setup: Setup) -> dict[str, tuple]:
    """LLaMA-492M's heaviest CODA GEMMs (hidden 2048, ffn 5632, q/k/v 3072), and the gated MLP's
    weight gradient (cuBLAS's in training, CODA's plain GEMM beside it): name -> (program, A, B,
    operands, out)."""
    m = setup.m
    h, f, qkv = (32, 48, 64) if setup.smoke else (2048, 5632, 3072)
    tile, row = setup.tile, setup.row
    norm = dict(ss=row() * h, inv_n=1.0 / h, eps=1e-5)
    x, dy, w_gate_up = tile(m, h), tile(m, h), tile(2 * f, h) / h**0.5
    cases = {
        "swiglu_grad": (gated.grad_program("silu", "sumsq", True), dy, tile(h, f) / f**0.5,
                        dict(g=tile(m, f), u=tile(m, f), **norm), None),
        "gated_dx": (gated.dx_program(None, True, True), tile(m, 2 * f), w_gate_up,
                     dict(**norm, dr=torch.randn(m, device=setup.device), xin=x, dres=dy), None),
        "swiglu_up": (gated.up_program("silu", "sumsq", True), x, w_gate_up.T, norm, None),
        "norm_dw": (norms.NORM_DW, tile(m, qkv).T, x, dict(g=tile(h), w=tile(qkv, h)), None),
        "rms_dxhat": (norms.RMS_DXHAT, tile(m, qkv), tile(qkv, h), dict(g=tile(h), xin=x), None),
        "plain_dw_gate_up": (PLAIN, tile(m, 2 * f).T, x, {}, None),
    }
    return cases


def llama(setup: Setup) -> list[dict]:
    """Each of llama_launches in the heuristic configuration and the GEMM_CONFIGS, timed."""
    launches = {name: (prog, prog.bind(a, b, out=out, **operands))
                for name, (prog, a, b, operands, out) in llama_launches(setup).items()}
    return gemms(setup, launches, GEMM_CONFIGS, cublas=lambda prog: prog is PLAIN)


def gpt2_launches(setup: Setup) -> dict[str, tuple]:
    """Every CODA GEMM launch of one GPT-2 training step (forward and backward of the patched HF
    model, the benchmark's batch), recorded as the step first configures each: name -> (program,
    launch). Named program_MxNxK; the tensors stay those of the recorded step."""
    import train  # benchmarks/, beside this script

    from coda.codegen.kernel import TritonProgram

    recorded, configure = {}, TritonProgram.config

    def record(self, launch, kernel):
        if kernel.variant != "map":
            recorded[f"{self.program.name}_{launch.m}x{launch.n}x{launch.k}"] = (self.program, launch)
        return configure(self, launch, kernel)

    model = train.build("gpt2", setup.smoke, torch.device(setup.device), setup.dtype)
    coda.patch(model)
    batch, seq = train.SMOKE_SHAPE if setup.smoke else train.SHAPES["gpt2"]
    ids = torch.randint(model.config.vocab_size, (batch, seq), device=setup.device)
    TritonProgram.config = record
    try:
        with unpadded_batches():
            model(input_ids=ids, labels=ids).loss.backward()
    finally:
        TritonProgram.config = configure
    return recorded


def gpt2(setup: Setup) -> list[dict]:
    """Each of gpt2_launches in the heuristic configuration and the GPT2_CONFIGS, cuBLAS beside."""
    return gemms(setup, gpt2_launches(setup), GPT2_CONFIGS, cublas=lambda prog: True, plain=True)


def gemms(setup: Setup, launches: dict[str, tuple], configs: list, cublas: Callable,
          plain: bool = False) -> list[dict]:
    """Each bound launch (name -> (program, launch)) in the heuristic configuration and `configs`,
    timed; every configuration's outputs must agree with the heuristic's. `cublas(program)`: time
    torch.matmul of the launch's A and B beside it. `plain`: time CODA's plain GEMM of the same
    A and B in the heuristic's configuration too (`coda_plain`: what the epilogue costs)."""
    from triton.runtime.errors import OutOfResources

    results = []
    for name, (prog, launch) in launches.items():
        if setup.cases is not None and name not in setup.cases:
            continue
        a, b, out = launch.concat or launch.a, launch.b, launch.out
        limits = (launch.m_limit, launch.k_limit)
        prior = None if out is None else out.clone()
        result, first = dict(case=name, m=launch.m, n=launch.n, k=launch.k), None
        heuristic = prog.triton.config(launch, prog.triton.kernel(launch))
        result["heuristic_is"] = str(heuristic)
        for config in ([None] if setup.smoke else setup.chosen(configs)):
            chosen = config or heuristic
            label = "heuristic" if config is None else config_label(config)
            try:
                plan = prog.triton.plan(launch, chosen)
                if out is not None:   # `output +=` programs: each check starts from the same out
                    out.copy_(prior)
                outputs = plan.run(a, b, launch.values, out, launch.seed, limits)
                got = {k: v.clone() for k, v in outputs.items()}
                first = first or got   # every configuration must agree with the heuristic's
                same = agrees(got, first)
                us = graph_time(lambda: plan.run(a, b, launch.values, out, launch.seed, limits), setup, 10)
                result[label] = round(us, 1) if same else f"WRONG {us:.1f}"
            except OutOfResources:
                result[label] = "OOR"
            except LaunchError:   # a program this mainloop cannot run (`output +=`: ping-pong)
                result[label] = "n/a"
        if plain and prog not in (PLAIN, ACCUMULATE):
            bare = PLAIN.triton.plan(PLAIN.bind(a, b), heuristic)
            result["coda_plain"] = round(graph_time(lambda: bare.run(a, b, {}, None, 0), setup, 10), 1)
        if cublas(prog):
            whole = launch.whole_a()
            result["cublas"] = round(graph_time(lambda: torch.matmul(whole, b), setup, 10), 1)
        results.append(result)
        print(result, flush=True)
    return results


def sm90(setup: Setup) -> list[dict]:
    """Each of llama_launches compiled for sm_90 (no GPU) in every Hopper candidate: shared memory,
    registers, spills; with the compile helpers of tests/codegen/test_hopper_compiles.py."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "codegen"))
    from test_hopper_compiles import SHARED_LIMIT, compile_sm90

    from coda.codegen import kernel as kernel_module
    from coda.codegen import tuning

    kernel_module._num_sms = lambda device: 132   # a Plan asks the GPU for its SM count
    results = []
    names = setup.cases or (["swiglu_grad", "gated_dx"] if setup.smoke else list(llama_launches(setup)))
    configs = tuning.CANDIDATES["hopper"][:1] if setup.smoke else setup.chosen(list(dict.fromkeys(
        tuning.CANDIDATES["hopper"] + GEMM_CONFIGS[1:])))
    for name, (prog, a, b, operands, out) in llama_launches(setup).items():
        if name not in names:
            continue
        launch = prog.bind(a, b, out=out, **operands)
        for config in configs:
            variant = config.mainloop("hopper")
            built = prog.triton._build(kernel_module._signature(launch, variant, config.stage_tiles,
                                                                config.stage_outputs, config.share_tiles),
                                       variant)
            found = compile_sm90(kernel_module, built, config, launch)
            results.append(dict(case=name, config=str(config), shared=found["shared"],
                                fits=found["shared"] <= SHARED_LIMIT, registers=found["registers"],
                                spilled=found["spilled"]))
            print(results[-1], flush=True)
    return results


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", choices=["maps", "llama", "gpt2", "sm90"])
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--smoke", action="store_true", help="tiny float32 shapes on the CPU, untimed")
    parser.add_argument("--cases", help="llama / gpt2 / sm90: only these launches (comma-separated names)")
    parser.add_argument("--configs", help="llama / gpt2 / sm90: only configurations whose label has this")
    args = parser.parse_args(argv)
    if not args.smoke:
        side_by_side.require_gpu("benchmarks/kernel_configs.py without --smoke")
    setup = Setup(args.smoke, bf16=args.suite == "sm90", cases=args.cases, configs=args.configs)
    torch.manual_seed(0)
    rows = {"maps": maps, "llama": llama, "gpt2": gpt2, "sm90": sm90}[args.suite](setup)
    if args.json:
        device = "cpu" if setup.device == "cpu" else torch.cuda.get_device_name()
        Path(args.json).write_text(json.dumps({"device": device, "torch": torch.__version__,
                                               "command": " ".join(sys.argv), "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
