"""benchmarks/gpu_clock.py: the summary of NVML samples, the sampling thread (against a stand-in
for NVML), and no summary where NVML is not there."""

from __future__ import annotations

import ctypes
import time

import gpu_clock  # benchmarks/, put on sys.path by conftest.py
import pytest
import torch


def test_summary_of_samples():
    capped = gpu_clock.POWER_CAP
    samples = [(1980, 300_000, 0), (1650, 690_000, capped), (1710, 680_000, capped | 0x20)]
    got = gpu_clock.summarize(samples)
    assert got["samples"] == 3
    assert got["sm_clock_mhz_mean"] == pytest.approx((1980 + 1650 + 1710) / 3)
    assert (got["sm_clock_mhz_min"], got["sm_clock_mhz_max"]) == (1650, 1980)
    assert got["power_w_mean"] == pytest.approx((300 + 690 + 680) / 3)
    assert got["power_capped"] == pytest.approx(2 / 3)
    assert got["thermal_slowdown"] == pytest.approx(1 / 3)
    assert got["hardware_slowdown"] == 0
    assert gpu_clock.summarize([]) is None


class FakeNVML:
    """Answers NVML's three queries through the ctypes out-arguments, as the library would."""

    def __init__(self):
        self.clock = 1980

    def nvmlDeviceGetClockInfo(self, handle, clock_type, out):
        assert clock_type == gpu_clock.NVML_CLOCK_SM
        out._obj.value, self.clock = self.clock, self.clock - 15
        return gpu_clock.NVML_SUCCESS

    def nvmlDeviceGetPowerUsage(self, handle, out):
        out._obj.value = 650_000
        return gpu_clock.NVML_SUCCESS

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle, out):
        out._obj.value = gpu_clock.POWER_CAP
        return gpu_clock.NVML_SUCCESS


def test_the_sampler_reads_nvml_while_its_block_runs(monkeypatch):
    monkeypatch.setattr(gpu_clock, "_nvml_device", lambda device: (FakeNVML(), ctypes.c_void_p()))
    with gpu_clock.Sampler(torch.device("cuda"), interval=0.001) as clocks:
        time.sleep(0.05)
    got = clocks.summary()
    assert got["samples"] >= 5 and got["sm_clock_mhz_max"] == 1980
    assert got["sm_clock_mhz_min"] < 1980 and got["power_w_mean"] == 650 and got["power_capped"] == 1
    assert not clocks.thread.is_alive()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_no_summary_without_a_gpu():
    for device in (torch.device("cpu"), torch.device("cuda")):
        with gpu_clock.Sampler(device) as clocks:
            pass
        assert clocks.summary() is None
