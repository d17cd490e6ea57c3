"""`Partials`: sums a launch left as its tiles' partials, for the kernels that read them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import LaunchError


@dataclass(frozen=True)
class Partials:
    """A vector not added up yet: `parts` [P, M] float32, whose sum over its first axis is the
    [M] vector. A launch leaves its row sums (and A's column sums) so where asked
    (`unfinished=`): each tile's partial, no finishing kernel. A program takes them as a row or
    column operand (the rows of a norm's statistics), and every kernel that reads a value adds
    its P parts as it loads it, in index order: the sum is formed where it is read, in a few
    loads, instead of by a launch of its own.

        stats = prog(x, w, outputs=["output", "ss"], unfinished=["ss"])   # ss: Partials
        y = norm(stats["output"], ss=stats["ss"])                          # adds them on load
    """

    parts: torch.Tensor

    def __post_init__(self):
        parts = self.parts
        if not isinstance(parts, torch.Tensor) or parts.dim() != 2 or parts.shape[0] < 1:
            got = f"shape {list(parts.shape)}" if isinstance(parts, torch.Tensor) else type(parts).__name__
            raise LaunchError(f"Partials takes a [P, M] tensor with P >= 1, got {got}")
        if not parts.is_floating_point():
            raise LaunchError(f"Partials: the partials have dtype {parts.dtype}; expected a "
                              f"floating-point tensor")

    @property
    def shape(self) -> torch.Size:
        return self.parts.shape[1:]

    @property
    def device(self) -> torch.device:
        return self.parts.device

    @property
    def dtype(self) -> torch.dtype:
        return self.parts.dtype

    def rows(self, count: int) -> Partials:
        """The parts of the first `count` values."""
        return Partials(self.parts[:, :count])

    def total(self) -> torch.Tensor:
        """The [M] sums, added in index order and in float32 (float64 parts in float64) as the
        kernels add them (PyTorch ops: for the reference backend, and where a tensor is
        needed). Half-precision parts were added in their own dtype: 2.0 off the kernels' sum
        of 64 bfloat16 parts."""
        total = self.parts[0].to(torch.promote_types(self.parts.dtype, torch.float32), copy=True)
        for part in self.parts[1:]:
            total += part
        return total
