#!/usr/bin/env bash
# The multi-GPU run: the LLaMA-style 492M model (HF, CODA patched in for `coda`) under DDP and
# FSDP2 on 2 GPUs, and on 1 GPU with the same global batch (16 x 2048 tokens), 100 steps each.
#   bash benchmarks/multi_gpu.sh ["ddp fsdp"] ["coda eager compile"] [steps]
# JSON per run in benchmarks/results/multi_gpu/, then a table: tokens/s per GPU, scaling
# efficiency (2-GPU tokens/s per GPU over 1-GPU tokens/s), peak memory, largest loss difference.
set -uo pipefail
cd "$(dirname "$0")/.."
# NVLink multicast stays off (a program that uses it can take the host's GPUs out of service)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} CODA_AUTOTUNE=${CODA_AUTOTUNE:-0}
OUT=benchmarks/results/multi_gpu; mkdir -p "$OUT"
STEPS=${3:-100}
for mode in ${1:-ddp fsdp}; do
    for model in ${2:-coda eager compile}; do
        for gpus in 2 1; do
            began=$SECONDS   # each run has a time limit (RUN_LIMIT), so one hang cannot eat the rest
            timeout "${RUN_LIMIT:-300}" python -m torch.distributed.run --standalone --nproc_per_node "$gpus" \
                benchmarks/train_distributed.py --mode "$mode" --model "$model" --arch llama \
                --steps "$STEPS" --batch-size $((16 / gpus)) --out "$OUT/${mode}_${model}_${gpus}gpu.json" \
                > "$OUT/${mode}_${model}_${gpus}gpu.log" 2>&1 || echo "$mode $model ${gpus} GPU: failed (see the log)"
            echo "$mode $model ${gpus} GPU: $((SECONDS - began)) s"
        done
    done
done
python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
runs = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*gpu.json"))}
print("| mode | model | 2-GPU tok/s per GPU | 1-GPU tok/s | scaling | peak GiB (2 GPU / 1) | max loss diff |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for key, two in runs.items():
    if not key.endswith("_2gpu") or key.replace("_2gpu", "_1gpu") not in runs:
        continue
    one = runs[key.replace("_2gpu", "_1gpu")]
    diff = max(abs(a - b) for a, b in zip(two["losses"], one["losses"]))
    print(f"| {two['mode']} | {two['model']} | {two['tokens_per_s_per_gpu'] / 1e3:.1f}k | "
          f"{one['tokens_per_s_per_gpu'] / 1e3:.1f}k | "
          f"{two['tokens_per_s_per_gpu'] / one['tokens_per_s_per_gpu']:.2f} | "
          f"{two['peak_memory_gib']:.1f} / {one['peak_memory_gib']:.1f} | {diff:.4f} |")
PY
