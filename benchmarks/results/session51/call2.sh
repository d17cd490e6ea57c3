#!/usr/bin/env bash
# Prepared in the fifty-first session (no device machine), for a later session's device: the GPU
# side of that session's changes, up to 9 minutes on a warm machine.
#   run(command="bash benchmarks/results/session51/next_session_tests.sh", timeout_s=560)
# (1) maxima that keep a NaN (row_max / col_max reduce with tl.maximum(propagate_nan=ALL)) in
#     every mainloop, the Hopper and Gluon ones included, and the maxima of `lse_max` at bf16;
# (2) the out= overlap checks, the ops' autograd changes (op_function: outputs not views,
#     differentiable once; tied_embedding's in-place add only into the LM head's marked gradient;
#     all-ignored cross-entropy) in the GPU op, GPT and HF tests (no false refusal in a real step);
# (3) `coda run` at GPT-2's fc1 shape: its outputs and its time beside torch.matmul's.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
timeout 170 python -m pytest -q -x tests/gpu/test_triton_gpu.py -k "maxima or lse_max" \
    > "$out/gpu_tests_maxima.txt" 2>&1
echo "maxima tests rc=$? at ${SECONDS}s"; tail -3 "$out/gpu_tests_maxima.txt"
timeout 300 python -m pytest -q tests/gpu/test_ops_*.py tests/gpu/test_nn_gpt.py tests/gpu/test_hf_gpu.py \
    tests/runtime/test_binding.py tests/ops/test_common.py tests/ops/test_embedding.py \
    > "$out/gpu_tests_ops_hf.txt" 2>&1
echo "ops + hf + binding tests rc=$? at ${SECONDS}s"; tail -3 "$out/gpu_tests_ops_hf.txt"
timeout 60 python -m coda run src/coda/examples/bias_gelu_dropout_residual.epi \
    --shape 16384,3072,768 --dtype bfloat16 | tee "$out/coda_run_fc1.txt"
echo "done at ${SECONDS}s"
