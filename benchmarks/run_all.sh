#!/usr/bin/env bash
# Every benchmark of docs/benchmarks.md on one GPU, in under 10 minutes: results in
# benchmarks/results/, plots in docs/img/.
#   bash benchmarks/run_all.sh          # everything (on a freshly started H200 the twelfth
#                                       # session's stages took 39 + 51 + 167 + 215 + 1 = 473 s,
#                                       # the thirteenth's 44 + 56 + 180 + 177 + 2 = 459 s,
#                                       # the fourteenth's 513 s; the fifteenth's, with the
#                                       # sixth training mode, on a machine with warm compile
#                                       # caches: 26 + 43 + 171 + 204 + 2 = 446 s; the
#                                       # twenty-first's, fresh: 42 + 53 + 181 + 212 + 3 = 491 s;
#                                       # the twenty-seventh's, fresh: 43 + 54 + 160 + 159 + 1 = 417 s;
#                                       # the thirty-sixth's, with compile+graph, on a machine
#                                       # warm from a call that had compiled CODA's kernels:
#                                       # 27 + 44 + 186 + 202 + 2 = 461 s)
#   bash benchmarks/run_all.sh ops      # launch counts, cross-entropy memory, the micro suite
#   bash benchmarks/run_all.sh train    # the training matrix and the loss curve
# Each stage has a time limit (seconds, below; together 600; the micro stage's raised from 200
# to 215 in the thirty-third session, for the replays of torch.compile's fwd+bwd; in the
# fortieth the training stage's raised from 245 to 265 for its rounds, the others trimmed to
# what they took at most on a fresh machine plus 5-25 s) and writes its JSON as it goes, so a
# stage that runs out keeps what it measured and the next one starts on time; status.txt says
# which stages finished. On a fresh machine much of the time is compilation (torch.compile,
# Liger's and CODA's Triton kernels): every benchmark runs its cases in processes that compile
# side by side on the host's cores and, once all are warm, are timed one at a time
# (benchmarks/side_by_side.py). The training runs of a model group take four rounds of six timed
# steps in turn (train.py --rounds: a rate is its rounds' median, and train.json's paired_ratios
# divides CODA's rate by the fastest peer's round by round, so a drift of the GPU's clock under
# its power cap counts against both alike; the report's figures take 15 rounds of 30 steps,
# docs/benchmarks.md). The training matrix leaves out the diagnostic mode eager+graph
# (`python benchmarks/train.py` runs it); it has compile+graph since the thirty-fourth session,
# which measured it 0.2-1.5% faster than torch.compile on all three models (one more process
# per model group, warming up beside the others; first run here in the thirty-sixth session,
# none out of memory). Memory: the llama+bert group's children peaked at 113 GiB together
# without it (train.json's peak_mem_gb, added up) and 135 GiB with it, near the H200's 139 GiB
# if their warm-ups peak at once; a child that runs out of memory becomes an error row. On a GPU
# with less memory (an 80 GB H100) each model's runs form a group of their own
# (`--models gpt2,llama,bert`): one more warm-up, so the stage gets 420 s and the whole run should
# take about 12.5 minutes there (forty-eighth session: its BERT group ran out of 340 s; 420 s not yet run). torch.compile's
# GPT-2 step compiled side by side has come out in its slow form (the LM head's weight gradient
# on a misaligned kernel, docs/benchmarks-log.md, thirty-sixth session): its matrix row can read
# 13-15% below the rate of its fast form.
set -uo pipefail
cd "$(dirname "$0")/.."
# CODA takes its heuristic kernel configurations (autotuning every shape would not fit the budget)
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1 CODA_AUTOTUNE=${CODA_AUTOTUNE:-0}
groups=${*:-ops train}
# GiB of GPU memory (0 without a GPU): below 130 LLaMA's and BERT's runs warm up apart
gpu_gib=$(python -c "import torch; print(torch.cuda.get_device_properties(0).total_memory >> 30 \
    if torch.cuda.is_available() else 0)" 2> /dev/null || echo 0)
if (( gpu_gib >= 130 )); then train_models=gpt2,llama+bert train_limit=265
else train_models=gpt2,llama,bert train_limit=420; fi
for group in $groups; do
    [[ $group == ops || $group == train ]] || { echo "run_all.sh: unknown group '$group' (ops, train)" >&2; exit 2; }
done
# without a GPU every stage would fail and overwrite the committed logs with its message
(( gpu_gib > 0 )) || { echo "run_all.sh needs a CUDA GPU; results/ left as it is" >&2; exit 2; }
failed=0
mkdir -p benchmarks/results
echo "== $(date -u +%FT%TZ) run_all.sh $groups" >> benchmarks/results/status.txt
# The GPU's clocks, power and temperature once a second while the stages run, with the time of
# day: a machine that lowers its clocks under load looks like slower code otherwise (train.py's
# rows say when their timed steps ran).
if command -v nvidia-smi > /dev/null; then
    TZ=UTC nvidia-smi dmon -s pc -o DT > benchmarks/results/gpu_clocks.log 2>&1 &
    trap "kill $! 2> /dev/null" EXIT
fi
stage() {  # stage NAME SECONDS COMMAND...
    local name=$1 limit=$2 began=$SECONDS; shift 2
    timeout "$limit" "$@" 2>&1 | tee "benchmarks/results/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "$name: rc=$rc in $((SECONDS - began)) s (limit $limit), ended $(date -u +%T)" |
        tee -a benchmarks/results/status.txt
    (( rc == 0 )) || failed=1
}
for group in $groups; do
    case $group in
        ops)
            stage launch_counts 50 python benchmarks/launch_counts.py
            stage cross_entropy 65 python benchmarks/cross_entropy_memory.py
            stage micro 210 python benchmarks/micro.py --max-autotune '' ;;
        train)
            stage train "$train_limit" python benchmarks/train.py --models "$train_models" \
                --modes eager,compile,liger,coda,coda+compile,compile+graph,coda+graph --steps 6 --rounds 4 \
                --warmup 2 --curve gpt2 --profile eager,coda+graph --timeout 200 ;;
    esac
done
stage report 10 python benchmarks/report.py
exit $failed   # nonzero where a stage failed or ran out of its time (status.txt says which)
