"""GPT-2's 200-step loss curves (curve_probe.py: KJV bytes, 16×1024, bf16, math attention) on
seeds 0 and 5 for eager PyTorch with its bf16 LM head, eager with a float32 LM head, and CODA's
default (the exponential head path): docs/img/train_loss_gpt2_heads.png.

    python benchmarks/results/session33/plot_heads.py
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "benchmarks" / "results"
RUNS = {"eager, bf16 head": ("session32/second", "session32/third", "eager"),
        "eager, float32 head": ("session33/third",) * 2 + ("eager_f32head",),
        "CODA (exponential head path)": ("session33/third",) * 2 + ("coda_exp",)}


def losses(seed: int, first: str, second: str, run: str) -> list[float]:
    """The run's losses: seeds 0-2 of session 32 are in `second`, 3-5 in `third`."""
    folder = first if seed < 3 else second
    return json.loads((RESULTS / folder / "curves.json").read_text())[f"{run}_seed{seed}"]


def main() -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, seed in zip(axes, (0, 5), strict=True):
        for label, source in RUNS.items():
            ax.plot(losses(seed, *source), label=label, linewidth=1)
        ax.set_title(f"GPT-2 124M, seed {seed}")
        ax.set_xlabel("step")
        ax.set_ylim(2.2, 4.0)   # the spikes at steps 11-13 reach 10-14
    axes[0].set_ylabel("training loss")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / "img" / "train_loss_gpt2_heads.png", dpi=110)


if __name__ == "__main__":
    main()
