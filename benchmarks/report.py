"""Plots and tables for docs/benchmarks.md and docs/performance.md from the JSON results.

    python benchmarks/report.py [--results benchmarks/results] [--out docs/img] [--tables]
                                [--gpu H200] [--gemm benchmarks/results/gemm.json ...]

Writes micro_<size>.png (time of each op, fwd+bwd, per implementation, as a multiple of the
cuBLAS time of its GEMMs), train_throughput.png (tokens/s per model and mode) and
train_breakdown.png (the GPU time of each step that results/train.json profiled, by kind of
kernel) and speedup.png (CODA over the fastest peer, per op and per model, from the latest runs
of the GPU that --gpu names); with --tables also prints the micro benchmark's markdown tables
(µs per op, fwd+bwd, per size) and the step breakdown's; with --gemm prints, per gemm.py result
file, the GEMM + epilogue table against the Hopper fast-path targets.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def grouped_bars(ax, groups: list[str], series: dict[str, list[float | None]], ylabel: str) -> None:
    """One cluster of bars per group, one bar per series (None: no bar)."""
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + i * width for g, v in enumerate(values) if v is not None]
        ax.bar(xs, [v for v in values if v is not None], width, label=name)
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))], groups, rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)


def micro_plots(results: Path, out: Path) -> None:
    rows = [r for r in json.loads((results / "micro.json").read_text())["results"]
            if "ms" in r and r["pass_"] == "fwd_bwd"]
    for size in sorted({r["size"] for r in rows}):
        ops = list(dict.fromkeys(r["op"] for r in rows if r["size"] == size))
        impls = list(dict.fromkeys(r["impl"] for r in rows if r["size"] == size))
        table = {(r["op"], r["impl"]): r["over_floor"] for r in rows if r["size"] == size}
        fig, ax = plt.subplots(figsize=(9, 4))
        grouped_bars(ax, ops, {i: [table.get((op, i)) for op in ops] for i in impls},
                     "fwd+bwd time / cuBLAS GEMM time")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_title(f"ops at {size} size, H200 bf16 (lower is better)")
        fig.tight_layout()
        fig.savefig(out / f"micro_{size}.png", dpi=110)
        plt.close(fig)


IMPLS = ("eager", "compile", "max_autotune", "liger", "coda")


def us(ms: float | None) -> str:
    """Milliseconds as whole microseconds; "—" for a figure the run did not produce."""
    return "—" if ms is None else f"{ms * 1e3:.0f}"


def micro_tables(results: Path) -> str:
    """Per size: fwd+bwd µs of every implementation, CODA's speed-up over the best peer, the
    most any implementation could gain over that peer while its GEMMs run at cuBLAS's speed
    (best ÷ floor: a fused op cannot take less time than its GEMMs), and the CUDA-graph replay
    times (host launch cost taken out) and kernel counts of eager and CODA."""
    rows = [r for r in json.loads((results / "micro.json").read_text())["results"] if "ms" in r]
    cell = {(r["op"], r["size"], r["impl"], r["pass_"]): r for r in rows}
    lines = []
    for size in dict.fromkeys(r["size"] for r in rows):
        ops = list(dict.fromkeys(r["op"] for r in rows if r["size"] == size))
        impls = [i for i in IMPLS if any((op, size, i, "fwd_bwd") in cell for op in ops)]
        lines += [f"\n{size}, fwd + bwd, µs:\n",
                  "| op | floor | " + " | ".join(impls) + " | CODA / best | best / floor | graph: eager "
                  "| graph: CODA | kernels: eager / CODA |",
                  "| --- " * (len(impls) + 7) + "|"]
        for op in ops:
            got = {i: cell[(op, size, i, "fwd_bwd")] for i in impls if (op, size, i, "fwd_bwd") in cell}
            if "coda" not in got:
                continue
            best = min(r["ms"] for i, r in got.items() if i != "coda")
            eager, coda = got.get("eager", {}), got["coda"]
            lines.append(f"| {op} | {us(coda['gemm_floor_ms'])} | "
                         + " | ".join(us(got[i]["ms"]) if i in got else "—" for i in impls)
                         + f" | {best / coda['ms']:.2f}× | {best / coda['gemm_floor_ms']:.2f}× | "
                           f"{us(eager.get('graph_ms'))} | "
                           f"{us(coda.get('graph_ms'))} | {eager.get('kernels', '—')} / "
                           f"{coda.get('kernels', '—')} |")
        lines += replayed_table(cell, size, ops, impls)
    return "\n".join(lines)


def replay_ms(row: dict) -> tuple[float, str] | None:
    """(ms, "graph") of a fwd+bwd row replayed from a CUDA graph, else (ms, "kernels"): its
    kernels' summed GPU time, a lower bound on any replay; None where neither was measured."""
    if row.get("graph_ms"):
        return row["graph_ms"], "graph"
    return (row["kernel_us"] / 1e3, "kernels") if row.get("kernel_us") else None


def replayed_table(cell: dict, size: str, ops: list[str], impls: list[str]) -> list[str]:
    """The same fwd+bwd replayed from CUDA graphs (µs; Liger, which cannot be captured, its
    kernels' summed time, marked *) and CODA's speed-up over the fastest peer so timed."""
    lines = [f"\n{size}, fwd + bwd replayed from CUDA graphs, µs (* kernels' summed time):\n",
             "| op | " + " | ".join(impls) + " | CODA / best |", "| --- " * (len(impls) + 2) + "|"]
    for op in ops:
        got = {impl: replay_ms(cell[(op, size, impl, "fwd_bwd")]) for impl in impls
               if (op, size, impl, "fwd_bwd") in cell}
        got = {impl: timed for impl, timed in got.items() if timed}
        if "coda" not in got or got["coda"][1] != "graph" or len(got) < 2:
            continue
        best = min(ms for impl, (ms, _) in got.items() if impl != "coda")
        lines.append(f"| {op} | " + " | ".join(us(got[i][0]) + "*" * (got[i][1] == "kernels") if i in got
                                               else "—" for i in impls)
                     + f" | {best / got['coda'][0]:.2f}× |")
    return lines


#: The Hopper fast-path targets: a fused epilogue's time over CODA's plain GEMM time.
GEMM_TARGET = {"short_k": (1024, 1.10), "long_k": 1.05}


def gemm_table(path: Path) -> str:
    """Per shape and epilogue (benchmarks/gemm.py): µs of cuBLAS, CODA's default, the best
    ping-pong configuration, cuBLASLt and eager, and CODA's best time over its best plain GEMM
    against the target (1.10 up to K = 1024, else 1.05): the median of the back-to-back ratios
    where the run timed them, else the ratio of the two best times. Beside cuBLASLt's µs, in
    parentheses, its fused form over cuBLAS's plain GEMM timed back to back, where the run did."""
    cell: dict[tuple, dict[str, float]] = {}
    paired: dict[tuple, float] = {}
    vendor_paired: dict[tuple, float] = {}
    for r in json.loads(path.read_text())["results"]:
        if r["impl"] == "coda_over_plain_paired":
            paired[(tuple(r["shape"]), r["case"])] = r["ratio"]
        elif r["impl"] == "cublaslt_over_cublas_paired":
            vendor_paired[(tuple(r["shape"]), r["case"])] = r["ratio"]
        else:
            cell.setdefault((tuple(r["shape"]), r["case"]), {})[r["impl"]] = r["ms"]
    lines = ["| M×N×K | epilogue | cuBLAS | CODA default | ping-pong | CODA best / CODA plain | target "
             "| cuBLASLt | eager |", "| --- " * 9 + "|"]
    for (shape, case), got in cell.items():
        if case == "plain" and "coda" not in got:
            continue  # the cuBLAS row

        def best(entries: dict[str, float]) -> float:
            return min(ms for impl, ms in entries.items() if impl.startswith("coda"))

        cublas = cell[(shape, "plain")]["cublas"]
        # timed back to back with the plain kernel where the run did (gemm.py --rounds)
        ratio = paired.get((shape, case), best(got) / best(cell[(shape, "plain")]))
        limit = GEMM_TARGET["short_k"][1] if shape[2] <= GEMM_TARGET["short_k"][0] else GEMM_TARGET["long_k"]
        mark = "✓" if ratio <= limit else "✗"
        digits = 3 if round(ratio, 2) <= limit < ratio else 2   # 1.054 is no "1.05 ✗"
        vendor = f" ({vendor_paired[(shape, case)]:.2f})" if (shape, case) in vendor_paired else ""
        lines.append(f"| {'×'.join(map(str, shape))} | {case} | {us(cublas)} | {us(got['coda'])} | "
                     f"{us(got.get('coda_pingpong'))} | {ratio:.{digits}f} {mark} | ≤ {limit:.2f} | "
                     f"{us(got.get('cublaslt'))}{vendor} | {us(got.get('eager'))} |")
    return "\n".join(lines)


def runs_of(results: Path, pattern: str, gpu: str | None = None) -> list[tuple[dict, Path]]:
    """(run, path) of every JSON result under `results` (the sessions' folders included) whose
    name matches `pattern`, oldest first by its date; with `gpu`, only the runs whose GPU's name
    contains it (the report reads its targets on the H200; later sessions ran on H100s too)."""
    runs = [(json.loads(path.read_text()), path) for path in results.glob(f"**/{pattern}")]
    return sorted([(run, path) for run, path in runs if gpu is None or gpu in (run.get("gpu") or "")],
                  key=lambda item: item[0].get("date", ""))


def train_table(results: Path, gpu: str | None = None) -> dict[tuple[str, str], float]:
    """{(model, mode): thousands of tokens/s} over every train*.json (of `gpu`, if given); where
    runs measured the same (model, mode), the latest run (by its date) counts. The runs of a
    variant tree (mode@NAME, train.py --tree) are experiments, not CODA: left out."""
    return {(r["model"], r["mode"]): r["tokens_per_s"] / 1e3
            for run, _ in runs_of(results, "train*.json", gpu) for r in run["rows"]
            if r.get("tokens_per_s") and "@" not in r["mode"]}


#: a profiled step's kinds of kernels (benchmarks/train.py's classes), as the report names them
STEP_PARTS = {"gemm": "GEMM (cuBLAS)", "attention": "attention", "coda": "CODA kernels",
              "optimizer": "optimizer", "other": "other"}


def profiled_rows(path: Path) -> list[dict]:
    """The rows of one train.py run that profiled a step (its --profile modes), by model."""
    rows = [row for row in json.loads(path.read_text())["rows"] if row.get("breakdown")]
    return sorted(rows, key=lambda row: row["model"])


def breakdown_table(path: Path) -> str:
    """Markdown: the GPU time of the profiled step of each (model, mode) of one train.py run, by
    kind of kernel (µs), and its kernel launches."""
    lines = ["| model | mode | " + " | ".join(STEP_PARTS.values()) + " | total | kernels |",
             "| --- | --- | " + "--- | " * (len(STEP_PARTS) + 2)]
    for row in profiled_rows(path):
        parts = row["breakdown"]
        cells = [f"{parts[part]:,.0f}" for part in (*STEP_PARTS, "total")] + [str(parts["launches"])]
        lines.append(f"| {row['model']} | {row['mode']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: issue 6's targets: CODA's speed over the fastest peer, per op and per training step
OP_TARGET, MODEL_TARGET = 1.15, 1.2


def model_ratios(results: Path, gpu: str | None = None) -> dict[str, dict]:
    """{model: paired ratio of coda+graph over its fastest peer (median, min, max, rounds,
    baseline, source)}: the latest train*.json (by date; of `gpu`, if given) that timed that
    model in interleaved rounds."""
    return {model: {**modes["coda+graph"], "source": str(path.relative_to(results))}
            for run, path in runs_of(results, "train*.json", gpu)
            for model, modes in run.get("paired_ratios", {}).items() if "coda+graph" in modes}


def replayed_ops(results: Path, gpu: str | None = None) -> list[dict]:
    """The op × size speed-ups of the latest micro*.json (of `gpu`, if given) that replayed the
    most cases from CUDA graphs (its summary_replayed): a whole suite, not a probe of a few."""
    summaries = [run.get("summary_replayed", []) for run, _ in runs_of(results, "micro*.json", gpu)]
    most = max(map(len, summaries), default=0)
    return next((summary for summary in reversed(summaries) if most and len(summary) == most), [])


def speedup_plot(results: Path, out: Path, gpu: str | None = None) -> None:
    """speedup.png: CODA's speed over the fastest peer, each op and size fwd+bwd replayed from
    CUDA graphs (`replayed_ops`) and each model's training step (coda+graph, the median of its
    interleaved rounds, the bar's whiskers their range), with the targets; with `gpu`, from that
    GPU's runs only."""
    ops = replayed_ops(results, gpu)
    models = model_ratios(results, gpu)
    if not ops and not models:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4), width_ratios=[3, 1])
    for ax, target in ((left, OP_TARGET), (right, MODEL_TARGET)):
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.axhline(target, color="tab:red", lw=1, ls="--", label=f"target {target}×")
    labels = [f"{row['op']}\n{row['size']}" for row in ops]
    left.bar(range(len(ops)), [row["speedup_vs_best"] for row in ops],
             color=["tab:green" if row["speedup_vs_best"] >= OP_TARGET else "tab:blue" for row in ops])
    left.set_xticks(range(len(ops)), labels, fontsize=6, rotation=90)
    left.set_ylabel("CODA's speed / fastest peer's")
    left.set_title(f"ops, fwd+bwd replayed from CUDA graphs{f' ({gpu})' if gpu else ''}")
    left.legend(fontsize=8)
    names = list(models)
    medians = [models[m]["median"] for m in names]
    whiskers = [[m - models[n]["min"] for n, m in zip(names, medians, strict=True)],
                [models[n]["max"] - m for n, m in zip(names, medians, strict=True)]]
    right.bar(range(len(names)), medians, yerr=whiskers, capsize=4,
              color=["tab:green" if m >= MODEL_TARGET else "tab:blue" for m in medians])
    right.set_xticks(range(len(names)), names)
    right.set_title(f"training step (coda+graph){f', {gpu}' if gpu else ''}")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_ylim(0.5, max(1.5, ax.get_ylim()[1]))
    fig.tight_layout()
    fig.savefig(out / "speedup.png", dpi=110)
    plt.close(fig)


def breakdown_plot(path: Path, out: Path) -> None:
    """train_breakdown.png: one stacked bar per profiled (model, mode) of one train.py run, ms of
    GPU time a step by kind of kernel."""
    rows = profiled_rows(path)
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(rows)), 4))
    bottom = [0.0] * len(rows)
    for part, name in STEP_PARTS.items():
        ms = [row["breakdown"][part] / 1e3 for row in rows]
        ax.bar(range(len(rows)), ms, bottom=bottom, label=name)
        bottom = [b + m for b, m in zip(bottom, ms, strict=True)]
    ax.set_xticks(range(len(rows)), [f"{row['model']}\n{row['mode']}" for row in rows], fontsize=8)
    ax.set_ylabel("GPU time of one training step (ms)")
    ax.set_title("where a training step's GPU time goes, H200 bf16 (one profiled step each)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "train_breakdown.png", dpi=110)
    plt.close(fig)


def train_plot(results: Path, out: Path, gpu: str | None = None) -> None:
    table = train_table(results, gpu)
    if not table:
        return
    models = list(dict.fromkeys(model for model, _ in table))
    modes = list(dict.fromkeys(mode for _, mode in table))
    fig, ax = plt.subplots(figsize=(10, 4))
    grouped_bars(ax, models, {m: [table.get((model, m)) for model in models] for m in modes},
                 "training tokens/s (thousands)")
    ax.set_title(f"training step throughput, {gpu or 'every GPU'}, bf16 (higher is better)")
    fig.tight_layout()
    fig.savefig(out / "train_throughput.png", dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[1]   # the defaults whatever the working directory
    parser.add_argument("--results", type=Path, default=root / "benchmarks" / "results")
    parser.add_argument("--out", type=Path, default=root / "docs" / "img")
    parser.add_argument("--tables", action="store_true", help="print the micro benchmark's tables")
    parser.add_argument("--gpu", default="H200",
                        help="plot the runs of GPUs whose name contains this ('' for every run)")
    parser.add_argument("--gemm", type=Path, nargs="*", default=[],
                        help="print the fast-path table of these gemm.py results (no plots)")
    args = parser.parse_args()
    if args.gemm:
        for path in args.gemm:
            print(f"\n{path}:\n\n{gemm_table(path)}")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    micro_plots(args.results, args.out)
    train_plot(args.results, args.out, args.gpu or None)
    speedup_plot(args.results, args.out, args.gpu or None)
    steps = args.results / "train.json"
    if steps.exists():
        breakdown_plot(steps, args.out)
    if args.tables:
        print(micro_tables(args.results))
        if steps.exists():
            print(f"\nA training step's GPU time by kind of kernel (µs, one profiled step; {steps}):\n")
            print(breakdown_table(steps))


if __name__ == "__main__":
    main()
