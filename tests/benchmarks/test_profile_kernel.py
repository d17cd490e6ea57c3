"""benchmarks/profile_kernel.py's `stalls`: stall samples and executed instructions summed over each
part of a ping-pong kernel (each MMA warpgroup's set-up, K loop and epilogue, the loader, the wait
loops), read from an ncu source-page CSV (synthetic here)."""

from __future__ import annotations

import csv

from conftest import load_script


def test_stalls_by_partition(tmp_path):
    profile = load_script("profile_kernel")
    header = ["Address", "Source", "Instructions Executed", "stall_barrier", "stall_no_inst",
              "stall_no_inst (Not Issued)"]
    # warpgroup 1 (the worker) first: K loop around 100, epilogue to the loader's start at 400;
    # then warpgroup 0: K loop around 600, epilogue to EXIT at 900; the wait loops after it
    marks = {100: "HGMMA.64x128x16.F32.BF16", 101: "HGMMA.64x128x16.F32.BF16",
             400: "USETMAXREG.DEALLOC.CTAPOOL 0x28", 600: "HGMMA.64x128x16.F32.BF16",
             601: "HGMMA.64x128x16.F32.BF16", 900: "EXIT"}
    sass = []
    for i in range(1000):
        no_inst = 3 if 622 <= i < 900 else 0   # instruction-fetch stalls: warpgroup 0's epilogue only
        sass.append([hex(i), marks.get(i, "FMUL R1, R2, R3"), "2", "1", str(no_inst), "99"])
    path = tmp_path / "source.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Kernel Name", "coda_gemm"])
        writer.writerow(header)
        writer.writerows(sass)
    lines = profile.stalls(str(path), "synthetic").splitlines()
    assert lines[0] == "## synthetic: 1000 SASS instructions"
    parts = {line.split(":")[0]: line for line in lines[1:]}
    assert list(parts) == ["warpgroup 1 set-up", "warpgroup 1 K loop", "warpgroup 1 epilogue",
                           "loader, idle warps, warpgroup 0 set-up", "warpgroup 0 K loop",
                           "warpgroup 0 epilogue", "wait loops"]
    assert parts["warpgroup 1 epilogue"] == ("warpgroup 1 epilogue: 278 samples, 556 warp instructions; "
                                             "barrier 100%, no_inst 0%")
    assert parts["warpgroup 0 epilogue"].startswith("warpgroup 0 epilogue: 1113 samples, 558 warp "
                                                    "instructions; no_inst 75%, barrier 25%")
    assert parts["wait loops"].startswith("wait loops: 99 samples")
