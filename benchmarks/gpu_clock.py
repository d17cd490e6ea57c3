"""The GPU's SM clock, power and clock-event reasons, sampled while a benchmark times its steps.

A step that keeps the tensor cores busy back to back can run the H200 into its power limit, and the
driver then lowers the clock: a slower run of the same code (the thirteenth session saw LLaMA's
timed steps at 1605-1965 MHz, GPT-2's at 1980). `nvidia-smi dmon` samples once a second, too
coarse for a timed stretch of under a second, so `Sampler` reads NVML itself every 10 ms from a
thread, through the driver's own library (libnvidia-ml, present wherever the CUDA driver is; no
Python package needed), and `summary` gives the stretch's mean, lowest and highest clock, its mean
power and the share of samples in which the driver reported a power cap or a thermal or hardware
slowdown. Where NVML cannot be loaded (no GPU, another vendor's) the summary is None.

    with gpu_clock.Sampler(torch.device("cuda")) as clocks:
        ...timed steps, synchronized...
    row["gpu_clock"] = clocks.summary()
"""

from __future__ import annotations

import ctypes
import threading
import time

import torch

#: NVML's clock-event reason bits (nvmlClocksEventReason*)
POWER_CAP = 0x4
THERMAL = 0x20 | 0x40            # software and hardware thermal slowdown
HARDWARE_SLOWDOWN = 0x8 | 0x80   # hardware slowdown, power brake
NVML_CLOCK_SM = 1
NVML_SUCCESS = 0


def _nvml_device(device: torch.device):
    """(the NVML library, the device's handle), or None where NVML or the device cannot be had.
    The handle is found by PCI bus id, so that CUDA_VISIBLE_DEVICES cannot mix up the indices."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != NVML_SUCCESS:
            return None
        props = torch.cuda.get_device_properties(device)
        bus_id = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
        handle = ctypes.c_void_p()
        if nvml.nvmlDeviceGetHandleByPciBusId_v2(bus_id.encode(), ctypes.byref(handle)) != NVML_SUCCESS:
            return None
        return nvml, handle
    except (OSError, AttributeError, RuntimeError, AssertionError):
        return None


def summarize(samples: list[tuple[int, int, int]]) -> dict | None:
    """(SM clock MHz, power mW, reason bits) samples -> the summary that goes into a result row."""
    if not samples:
        return None
    clocks = [clock for clock, _, _ in samples]

    def share(bits: int) -> float:
        return sum(1 for *_, reasons in samples if reasons & bits) / len(samples)
    return dict(samples=len(samples), sm_clock_mhz_mean=sum(clocks) / len(clocks),
                sm_clock_mhz_min=min(clocks), sm_clock_mhz_max=max(clocks),
                power_w_mean=sum(power for _, power, _ in samples) / len(samples) / 1e3,
                power_capped=share(POWER_CAP), thermal_slowdown=share(THERMAL),
                hardware_slowdown=share(HARDWARE_SLOWDOWN))


class Sampler:
    """A context manager that samples `device`'s SM clock, power and clock-event reasons every
    `interval` seconds while its block runs (nothing where NVML is not available)."""

    def __init__(self, device: torch.device, interval: float = 0.01):
        self.nvml = _nvml_device(device) if device.type == "cuda" else None
        self.interval = interval
        self.samples: list[tuple[int, int, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        nvml, handle = self.nvml
        reasons_of = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        clock, power, reasons = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        while not self.stop.is_set():
            if (nvml.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM, ctypes.byref(clock)) == NVML_SUCCESS
                    and nvml.nvmlDeviceGetPowerUsage(handle, ctypes.byref(power)) == NVML_SUCCESS
                    and reasons_of(handle, ctypes.byref(reasons)) == NVML_SUCCESS):
                self.samples.append((clock.value, power.value, reasons.value))
            time.sleep(self.interval)

    def __enter__(self) -> Sampler:
        if self.nvml is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()

    def summary(self) -> dict | None:
        return summarize(self.samples)
