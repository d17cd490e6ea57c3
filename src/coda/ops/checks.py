"""Argument checks shared by the ops: every bad argument is a LaunchError that names it."""

from __future__ import annotations

import numbers

import torch

from ..errors import LaunchError
from ..runtime.binding import check_strided
from ..runtime.binding import describe as describe  # the runtime's, for the ops' messages


def weight(name: str, w: object, x: torch.Tensor, in_features: int,
           source: str = "x's last dimension") -> int:
    """`w` is an nn.Linear weight [out_features, in_features] of x's dtype and device, its
    in_features what `source` holds; returns out_features."""
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        raise LaunchError(f"{name} must be a 2-D tensor [out_features, in_features], got {describe(w)}")
    check_strided(name, w)
    if in_features == 0:
        raise LaunchError(f"{name}: in_features is 0 ({source}): a layer needs at least one input "
                          f"feature")
    if w.shape[1] != in_features:
        raise LaunchError(f"{name} is {list(w.shape)} = [out_features, in_features] but {source} is "
                          f"{in_features}: the two must match")
    if w.dtype != x.dtype or w.device != x.device:
        raise LaunchError(f"{name} is {w.dtype} on {w.device} but x is {x.dtype} on {x.device}: "
                          f"they must match")
    return w.shape[0]


def integer(value: object) -> bool:
    """Whether `value` is an integer: a Python int or a NumPy one (numbers.Integral), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def real(value: object) -> bool:
    """Whether `value` is a real number: int, float or a NumPy scalar (numbers.Real), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def flag(name: str, value: object) -> bool:
    """A True / False option (not 0, 1 or None)."""
    if not isinstance(value, bool):
        raise LaunchError(f"{name} must be True or False, got {value!r}")
    return value


def eps(op: str, value: object) -> float:
    """A norm's epsilon: a real number >= 0 (not a bool), as a float."""
    if not real(value) or not value >= 0:
        raise LaunchError(f"{op}: eps must be a number >= 0, got {value!r}")
    return float(value)


def optional_tensor(name: str, t: object, shape: tuple[int, ...], x: torch.Tensor) -> None:
    """`t` is None, or a floating-point tensor of `shape` on x's device."""
    if t is None:
        return
    if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(shape) or not t.is_floating_point():
        raise LaunchError(f"{name} must be a floating-point tensor of shape {list(shape)}, got "
                          f"{describe(t)}")
    if t.device != x.device:
        raise LaunchError(f"{name} is on {t.device} but x is on {x.device}")


def float_tensor(op: str, name: str, t: object, x: torch.Tensor | None = None) -> None:
    """`t` is a floating-point tensor (on x's device, when x is given)."""
    if not isinstance(t, torch.Tensor):
        raise LaunchError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    check_strided(f"{op}: {name}", t)
    if not t.is_floating_point():
        raise LaunchError(f"{op}: {name} has dtype {t.dtype}; expected float16, bfloat16, float32 "
                          f"or float64")
    if x is not None and t.device != x.device:
        raise LaunchError(f"{op}: {name} is on {t.device} but x is on {x.device}")


def vector(op: str, name: str, t: object, size: int, x: torch.Tensor) -> None:
    """`t` is a floating-point tensor [size] on x's device (a gain, a bias)."""
    float_tensor(op, name, t, x)
    if tuple(t.shape) != (size,):
        raise LaunchError(f"{op}: {name} must have shape [{size}], got {list(t.shape)}")


def row_sums(op: str, name: str, t: object, x: torch.Tensor) -> None:
    """`t` is a norm's row statistic (Σ x or Σ x² from x's producer) on x's device, in float32 or
    float64: rounded to 16 bits, a LayerNorm's variance Σ x²/n - (Σ x/n)² cancels into noise (a
    10x larger error where rows have a mean of 8), and nothing downstream could tell."""
    float_tensor(op, name, t, x)
    if t.dtype in (torch.float16, torch.bfloat16):
        raise LaunchError(f"{op}: {name} has dtype {t.dtype}; a row sum must be float32 (or float64), "
                          f"as a producer's epilogue gives it. FSDP2's MixedPrecisionPolicy casts the "
                          f"floating-point inputs of a sharded module's forward: give it "
                          f"cast_forward_inputs=False, or keep the sums inside one fully_shard unit")


def row_stats(op: str, x: torch.Tensor, m: int, **sums: torch.Tensor | None) -> None:
    """Each given per-row statistic (Σ x, Σ x² from x's producer) has one value per row of x."""
    for name, t in sums.items():
        if t is None:
            continue
        row_sums(op, name, t, x)
        if tuple(t.shape) not in (tuple(x.shape[:-1]), (m,)):
            raise LaunchError(f"{op}: {name} must have one value per row of x, shape "
                              f"{list(x.shape[:-1])} or [{m}], got {list(t.shape)}")
