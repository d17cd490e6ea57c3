#!/usr/bin/env bash
# Left for the next device session (thirtieth session's closing note): three kinds of call.
#   bash benchmarks/results/session30/next_session.sh run_all   (carry .whl: Liger's wheel)
#   bash benchmarks/results/session30/next_session.sh gpu_tests
#   bash benchmarks/results/session30/next_session.sh head      (on main, exp-ftz, target-gather)
# run_all: the report's one command with the LM head's exponential path, which re-runs GPT-2's
# 200-step loss curve against eager (not re-run since the path landed), the micro suite's head
# rows and the training matrix; everything it writes comes back as $OUT/run_all.tar.gz.
# gpu_tests: the whole GPU suite with room to finish (the thirtieth session's run stopped at its
# 320 s limit with 552 of 553 passed).
# head: head_probe.py and GPT-2 against torch.compile, to run once on main and once after
# `git checkout exp-ftz` or `git am benchmarks/results/session30/exp_ftz.patch` (a branch and its patch: the DSL's exp as one multiplication and ex2.approx.ftz, the
# head's forward epilogue 4080 SASS instructions against 4840 offline, never run on a GPU; merge
# it if it is faster and the GPU tests pass on it); likewise `target-gather`
# (`target_gather.patch`: the target's logit as a gather and a dot product per row outside the
# GEMM, 3768 instructions offline; the twenty-fifth session measured such a gather-dot slower in
# the general path, with a shorter epilogue running slower, unexplained), and both together.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
case "$1" in
  run_all)
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
    start=$(date +%s)
    timeout 585 bash benchmarks/run_all.sh > $OUT/run_all.log 2>&1
    echo "run_all.sh: rc $? in $(( $(date +%s) - start )) s"
    tar czf $OUT/run_all.tar.gz benchmarks/results/*.json benchmarks/results/*.log benchmarks/results/status.txt \
      docs/img/*.png 2>/dev/null
    tail -8 benchmarks/results/status.txt ;;
  gpu_tests)
    timeout 500 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu > $OUT/gpu_tests.txt 2>&1
    echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/gpu_tests.txt | tail -12 ;;
  head)
    timeout 100 python benchmarks/results/session30/head_probe.py --json $OUT/head_probe.json > $OUT/head_probe.log 2>&1
    echo "head probe rc=$?"; grep -v Warn $OUT/head_probe.log | tail -6
    timeout 170 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --steps 8 --warmup 2 \
      --curve none --profile coda+graph --timeout 160 --json $OUT/train_gpt2.json > $OUT/train_gpt2.log 2>&1
    echo "train rc=$?"; tail -4 $OUT/train_gpt2.log ;;
  *) echo "usage: $0 run_all | gpu_tests | head"; exit 2 ;;
esac
