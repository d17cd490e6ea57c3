"""benchmarks/profile_kernel.py's `stalls`: stall samples summed over the whole kernel and over each
ping-pong warpgroup's epilogue code, read from an ncu source-page CSV (synthetic here)."""

from __future__ import annotations

import csv

from conftest import load_script


def test_stalls_by_region(tmp_path):
    profile = load_script("profile_kernel")
    header = ["Address", "Source", "stall_barrier", "stall_no_inst", "stall_no_inst (Not Issued)"]
    sass = []
    for i in range(1000):
        source = "HGMMA.64x128x16.F32.BF16" if i in (100, 101, 600, 601) else "FMUL R1, R2, R3"
        # epilogue of warpgroup 1: [616, 900) holds the only instruction-fetch stalls
        no_inst = 3 if 616 <= i < 900 else 0
        sass.append([hex(i), source, "1", str(no_inst), "99"])
    path = tmp_path / "source.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Kernel Name", "coda_gemm"])
        writer.writerow(header)
        writer.writerows(sass)
    lines = profile.stalls(str(path), "synthetic").splitlines()
    assert lines[0] == "## synthetic: 1000 SASS instructions"
    whole, first, second = lines[1:]
    assert whole.startswith("whole kernel [0, 1000): 1852 samples; barrier 54.0%, no_inst 46.0%")
    assert first.startswith("warpgroup 0 epilogue [116, 300): 184 samples; barrier 100.0%")
    assert second.startswith("warpgroup 1 epilogue [616, 900): 1136 samples; no_inst 75.0%, barrier 25.0%")
