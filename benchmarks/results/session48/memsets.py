"""Where the memsets and device-to-device copies of a CODA-patched training step come from, and
how long the GPU sits idle after each: a non-graph step (each one traced to the Python frames
that issued it) and a captured step (its neighbours in the replay).

    python benchmarks/results/session48/memsets.py --model gpt2 --out $OUT/memsets_gpt2.txt
"""

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import torch
import train

import coda
from coda.integrations.hf import unpadded_batches


def trace(fn) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True) as prof:
        fn()
        torch.cuda.synchronize()
    path = tempfile.mktemp(suffix=".json")
    prof.export_chrome_trace(path)
    return json.load(open(path))["traceEvents"]


def gpu_events(events):
    return sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")),
                  key=lambda e: e["ts"])


def frames(events, runtime):
    """The innermost cpu_op and the python frames (coda / transformers / torch.optim) around `runtime`."""
    tid, ts = runtime["tid"], runtime["ts"]
    around = [e for e in events if e.get("tid") == tid and e.get("cat") in ("cpu_op", "python_function")
              and e["ts"] <= ts <= e["ts"] + e.get("dur", 0)]
    around.sort(key=lambda e: e["ts"])
    ops = [e["name"] for e in around if e["cat"] == "cpu_op"]
    py = [e["name"] for e in around if e["cat"] == "python_function"
          and any(k in e["name"] for k in ("coda", "transformers", "optim", "autograd"))]
    return (ops[-1] if ops else "?"), " < ".join(py[::-1][:4])


def report(events, lines, attribute):
    gpu = gpu_events(events)
    runtime = {e["args"].get("correlation"): e for e in events if e.get("cat") == "cuda_runtime"}
    counts, idle = collections.Counter(), collections.Counter()
    for i, e in enumerate(gpu):
        if e["cat"] == "kernel":
            continue
        nxt = gpu[i + 1] if i + 1 < len(gpu) else None
        gap = (nxt["ts"] - (e["ts"] + e["dur"])) if nxt else 0.0
        prev = gpu[i - 1]["name"][:50] if i else "-"
        if attribute:
            rt = runtime.get(e["args"].get("correlation"))
            where = frames(events, rt) if rt else ("?", "")
        else:
            where = (f"after {prev}", f"before {nxt['name'][:50] if nxt else '-'}")
        key = (e["cat"], e["name"][:30], *where)
        counts[key] += 1
        idle[key] += gap
        lines.append(f"  {e['cat']:10} {e['dur']:6.1f} us  idle after {gap:7.1f}  bytes "
                     f"{e['args'].get('bytes', '?')}  {where[0]} | {where[1]}")
    lines.append("  summary (count, total idle after, what):")
    for key, n in sorted(counts.items(), key=lambda kv: -idle[kv[0]]):
        lines.append(f"    {n:3d} {idle[key]:8.1f}  {' | '.join(key)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    device = torch.device("cuda")
    model = train.build(args.model, False, device, torch.bfloat16)
    coda.patch(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=train.LR, fused=True, capturable=True)
    batch, seq = train.SHAPES[args.model]
    generator = torch.Generator().manual_seed(0)
    inputs = train.model_inputs(args.model, torch.randint(model.config.vocab_size, (batch, seq),
                                                          generator=generator),
                                model.config.vocab_size, generator, device)

    def train_step(**b):
        loss = model(**b).loss
        loss.backward()
        optimizer.step()
        return loss

    def plain():
        train_step(**inputs)
        optimizer.zero_grad(set_to_none=True)

    lines = []
    with unpadded_batches():
        for _ in range(3):
            plain()
        lines.append(f"{args.model}: non-graph step")
        report(trace(plain), lines, attribute=True)
    captured = coda.capture_step(train_step, optimizer, warmup=2, context=unpadded_batches, **inputs)
    for _ in range(3):
        captured(**inputs)
    lines.append(f"{args.model}: captured step")
    report(trace(lambda: captured(**inputs)), lines, attribute=False)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(line for line in lines if line.startswith(("gpt2", "bert", "llama", "    "))))


if __name__ == "__main__":
    main()
