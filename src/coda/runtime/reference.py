"""The reference backend: eager PyTorch evaluation of the IR, the ground truth and the CPU path.

It computes in float32, or in float64 when A is float64, on whole [M, N] tensors: no tiles.
"""

from __future__ import annotations

import dataclasses

import torch

from ..ir import Node, as_float
from ..passes.widths import COLUMNS, UNPACKED, columns
from ..primitives import PRIMITIVES
from . import rng
from .binding import A_COL_SUMS, Launch
from .partials import Partials


@torch.no_grad()
def run_reference(launch: Launch) -> dict[str, torch.Tensor]:
    """Evaluate the bound program and write its outputs (into `out=` when given); with an
    `m_limit` only their rows before it. An unfinished row sum comes back as Partials of
    one part: the sum itself. Outside autograd, as a Triton launch is: a launch is a kernel,
    on every backend (a trainable op is a torch.autograd.Function, docs/python-api.md)."""
    outputs = launch.allocate_outputs()
    launch, rows = _limited(launch)
    results = evaluate(launch)
    if A_COL_SUMS in outputs:
        ct = torch.float64 if launch.a.dtype == torch.float64 else torch.float32
        results[A_COL_SUMS] = launch.whole_a().to(ct).sum(0)
    # `output` last: the others may be views of `out=` as it was (a saved prior, an operand or
    # a map's input that is `out` itself), which writing `output` would change under them.
    for spec in sorted(launch.outputs, key=lambda spec: spec.name == "output"):
        tensor = outputs[spec.name]
        (tensor if (spec.reduction or "").startswith("col") else tensor[:rows]).copy_(results[spec.name])
    for name in launch.unfinished:
        outputs[name] = Partials(outputs[name][None, :])
    return outputs


def _limited(launch: Launch) -> tuple[Launch, int]:
    """The launch as if M and K were at most its limits (read back from the device: this is
    the ground truth, not the fast path), and its M. On the meta device a limit has no value
    to read, and the outputs no values to keep: the launch runs whole."""
    if launch.a.device.type == "meta":
        return launch, launch.m
    m = launch.m if launch.m_limit is None else max(0, min(launch.m, int(launch.m_limit)))
    k = launch.k if launch.k_limit is None else max(0, min(launch.k, int(launch.k_limit)))
    if (m, k) == (launch.m, launch.k):
        return launch, m
    a = launch.whole_a()[:m, :k] if launch.b is not None else launch.whole_a()[:m]
    b = None if launch.b is None else launch.b[:k]
    values = {name: (value.rows(m) if isinstance(value, Partials) else value[:m])
              if launch.kinds[name] in ("row", "tile", "head") else value
              for name, value in launch.values.items()}
    outputs = tuple(dataclasses.replace(s, shape=(m, *s.shape[1:])) if s.reduction is None or
                    s.reduction.startswith("row") else s for s in launch.outputs)
    out = None if launch.out is None else launch.out[:m]
    return dataclasses.replace(launch, a=a, b=b, m=m, k=k, values=values, outputs=outputs, out=out,
                               concat=None, m_limit=None, k_limit=None), m


def evaluate(launch: Launch, compute_dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """Every output of the program, full size, computed in `compute_dtype` (default float32, or
    float64 when A is float64; tests pass A's own dtype to mimic eager PyTorch at that dtype)."""
    program, m, n = launch.program, launch.m, launch.n
    ct = compute_dtype or (torch.float64 if launch.a.dtype == torch.float64 else torch.float32)
    cols = {w: columns(w, n) for w in COLUMNS}
    domains = program.widths.nodes
    env: dict[Node, torch.Tensor] = {}

    def tile(node: Node, width: str | None = None) -> torch.Tensor:
        """`node`'s value, whole, in the `width` domain where pack, rope or dropout reads it
        (default its own): a value that does not depend on the column (a constant, a row
        operand) is one node in both domains, in the [M, N] one by its own."""
        return env[node].expand(m, cols[width or domains[node]])

    for node in program.ir.nodes():
        op, args = node.op, [env[a] for a in node.args]
        if op == "input":
            value = launch.whole_a().to(ct)
            value = value if launch.b is None else value @ launch.b.to(ct)
        elif op == "operand":
            value = _broadcastable(launch.values[node.arg], launch.kinds[node.arg], ct)
        elif op == "const":
            value = torch.tensor(node.arg, dtype=ct, device=launch.a.device)
        elif op == "prior":
            value = launch.out.to(ct)
        elif op == "unpack":
            value = tile(node.args[0])[:, node.arg::2]
        elif op == "pack":
            value = torch.stack([tile(a, UNPACKED[domains[node]]) for a in node.args], dim=2).flatten(1)
        elif op == "dropout":
            x = tile(node.args[0], domains[node])
            p = args[1].clamp(0, 1).nan_to_num(1.0)   # as tl_math.probability
            keep = rng.dropout_mask(launch.seed, p.float(), m, x.shape[1], x.device)
            # x times 0 or the scale 1 / (1 - p), rounded once, as the kernels and torch's
            # dropout (x / (1 - p) rounded differently in float32); a dropped NaN, inf: NaN
            value = x * torch.where(keep, 1 / (1 - p), 0.0)
        elif op == "row_index":
            value = torch.arange(m, dtype=ct, device=launch.a.device)[:, None]
        elif op == "col_index":
            value = torch.arange(cols[domains[node]], dtype=ct, device=launch.a.device)[None, :]
        elif op == "rope":
            value = _rope(tile(node.args[0], domains[node]), args[1], args[2])
        else:
            value = PRIMITIVES[op].ref(*args)
        env[node] = value
    wanted = {spec.name for spec in launch.outputs}
    return {o.name: _finish(o.reduction, tile(o.value)) for o in program.ir.outputs
            if o.name in wanted}


def _broadcastable(value, kind: str, ct: torch.dtype) -> torch.Tensor:
    if kind == "scalar":
        return torch.as_tensor(value if isinstance(value, torch.Tensor) else as_float(value), dtype=ct)
    value = (value.total() if isinstance(value, Partials) else value).to(ct)
    return {"row": lambda: value[:, None], "col": lambda: value[None, :]}.get(kind, lambda: value)()


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    pair = torch.arange(x.shape[1] // 2, device=x.device) % cos.shape[1]
    c, s = cos[:, pair], sin[:, pair]
    first, second = x[:, 0::2], x[:, 1::2]
    return torch.stack((first * c - second * s, second * c + first * s), dim=2).flatten(1)


def _finish(reduction: str | None, x: torch.Tensor) -> torch.Tensor:
    if reduction is None:
        return x
    return {
        "row_sum": lambda: x.sum(1), "col_sum": lambda: x.sum(0),
        "row_max": lambda: _amax(x, 1), "col_max": lambda: _amax(x, 0),
        "row_logsumexp": lambda: torch.logsumexp(x, 1),
    }[reduction]()


def _amax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The maximum along `dim`; -inf over no values (N or M is 0), as the kernels' maxima start
    (torch.amax refuses an empty dimension)."""
    if x.shape[dim] == 0:
        return x.new_full(x.shape[:dim] + x.shape[dim + 1:], -torch.inf)
    return x.amax(dim)
