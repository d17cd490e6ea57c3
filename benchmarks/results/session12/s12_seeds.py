"""GPT-2 loss curves for more seeds (twelfth session): train.py's curve setup (200 steps, KJV
bytes, AdamW with coda.train's schedule) in eager mode and with CODA, the same initialization
and batches per seed. Does CODA take loss spikes more often than eager?

    CODA_AUTOTUNE=0 OUT=<dir> python benchmarks/results/session12/s12_seeds.py   # writes <dir>/seeds.json

(The run wrote curve_seeds.json with a terser draft of this script: the same computation.)
"""

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "src")]
spec = importlib.util.spec_from_file_location("train", ROOT / "benchmarks" / "train.py")
train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)
from coda.train import batch as text_batch  # noqa: E402
from coda.train import learning_rate, load_corpus  # noqa: E402

STEPS, BUDGET_S = 200, 150


def run(mode: str, seed: int, data: torch.Tensor) -> list[float]:
    """One curve (the losses per step): train.build and train.prepare with train.SEED = seed."""
    device = torch.device("cuda")
    train.SEED = seed
    model = train.build("gpt2", False, device, torch.bfloat16)
    step_model = train.prepare(model, mode)
    optimizer = torch.optim.AdamW(model.parameters(), lr=train.LR, fused=True)
    generator = torch.Generator().manual_seed(seed)
    batch_size, seq = train.SHAPES["gpt2"]
    losses = []
    for i in range(STEPS):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(i, STEPS, train.LR)
        ids, _ = text_batch(data, batch_size, seq, generator, torch.device("cpu"))
        inputs = train.model_inputs("gpt2", ids, model.config.vocab_size, generator, device)
        loss = step_model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    return torch.stack(losses).float().tolist()


def main() -> None:
    data, out, start = load_corpus(), {}, time.time()
    for seed in (1, 2, 3, 4, 5):
        for mode in ("eager", "coda"):
            if time.time() - start > BUDGET_S:
                break
            losses = run(mode, seed, data)
            out.setdefault(str(seed), {})[mode] = losses
            print(f"seed {seed} {mode:6s} last-50 mean {sum(losses[-50:]) / 50:.4f}  "
                  f"t={time.time() - start:.0f}s", flush=True)
            torch.cuda.empty_cache()
            Path(os.environ["OUT"], "seeds.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main()
