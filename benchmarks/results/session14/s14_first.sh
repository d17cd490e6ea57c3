#!/usr/bin/env bash
# Fourteenth session, first device call: the ping-pong kernel with the epilogue loading its own
# tile operands, timed on LLaMA's heaviest launches; then the GPU tests (capture_step,
# gpu_clock and the new mainloop run on a GPU for the first time).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv > $OUT/gpu.txt
timeout 230 python benchmarks/kernel_configs.py llama --cases swiglu_grad,gated_dx,plain_partial_f32 \
  --json $OUT/llama_configs.json > $OUT/llama_configs.log 2>&1
echo "kernel_configs rc=$? at $SECONDS s" >> $OUT/llama_configs.log
cat $OUT/llama_configs.log
# gpu_clock's NVML path on a real GPU: 2 s of back-to-back GEMMs
python - <<'PY' 2>&1 | tee $OUT/gpu_clock_check.txt
import sys, time, torch
sys.path.insert(0, "benchmarks")
import gpu_clock
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
with gpu_clock.Sampler(torch.device("cuda")) as clocks:
    end = time.perf_counter() + 2
    while time.perf_counter() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()
print("gpu_clock summary:", clocks.summary())
PY
timeout $((590 - SECONDS)) python -m pytest -q -n 8 -p no:cacheprovider tests/gpu \
  tests/integrations/test_compile_gpu.py tests/benchmarks/test_gpu_clock.py > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$? at $SECONDS s" >> $OUT/gpu_tests.txt
tail -30 $OUT/gpu_tests.txt
