"""Call 7's Nsight Compute CSVs as one table: the third launch of the plain kernel and of (b).

    python benchmarks/results/session59/ncu_table.py philox10 threefry13 philox0
"""

import csv
import sys
from pathlib import Path

CALL7 = Path(__file__).parent / "call7"
keys = {"µs": "gpu__time_duration.sum", "kcycles": "gpc__cycles_elapsed.max",
        "MHz": "gpc__cycles_elapsed.max.per_second",
        "tensor%": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "issue%": "sm__issue_active.avg.pct_of_peak_sustained_elapsed",
        "alu%": "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active",
        "fma%": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
        "fmaheavy%": "sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_elapsed",
        "xu%": "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
        "dispatch": "smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio",
        "long_sb": "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
        "barrier": "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
        "wait": "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
        "no_inst": "smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio",
        "math_thr": "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
        "short_sb": "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
        "not_sel": "smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio",
        "gmma": "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio"}
print("| hash | kernel | " + " | ".join(keys) + " |")
print("| --- " * (len(keys) + 2) + "|")
for rng in sys.argv[1:]:
    rows = [r for r in csv.reader(open(CALL7 / f"ncu_{rng}.csv")) if len(r) > 100]
    hdr, data = rows[0], rows[2:]
    for idx, kernel in ((2, "plain"), (5, "(b)")):
        r = data[idx]
        vals = []
        for k, name in keys.items():
            v = r[hdr.index(name)].replace(",", "") if name in hdr else "?"
            if k == "µs":
                v = f"{float(v) / 1000:.1f}"
            elif k == "kcycles":
                v = f"{float(v) / 1000:.0f}"
            elif k == "MHz":
                v = f"{float(v) / 1e6:.0f}"
            vals.append(v)
        print(f"| {rng} | {kernel} | " + " | ".join(vals) + " |")
