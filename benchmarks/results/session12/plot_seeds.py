"""The twelfth session's GPT-2 loss curves on seeds 1-4 (curve_seeds.json, from s12_seeds.py),
eager against CODA, one panel a seed: docs/img/train_loss_gpt2_seeds.png.

    python benchmarks/results/session12/plot_seeds.py
"""

import json
import sys
from pathlib import Path

from matplotlib.figure import Figure  # Agg: a Figure needs no display

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "src"))
from coda.train import moving_average  # noqa: E402


def main() -> None:
    seeds = {seed: runs for seed, runs in json.loads((Path(__file__).parent / "curve_seeds.json")
                                                      .read_text()).items() if "coda" in runs}
    fig = Figure(figsize=(9, 6), dpi=110)
    axes = fig.subplots(2, 2, sharex=True).flat
    for ax, (seed, runs) in zip(axes, seeds.items(), strict=False):
        for (mode, losses), (color, style) in zip(runs.items(), (("tab:blue", "-"), ("tab:orange", "--")),
                                                  strict=True):
            steps = range(1, len(losses) + 1)
            ax.plot(steps, losses, color=color, alpha=0.25, linewidth=0.8)
            ax.plot(steps, moving_average(losses, 10), style, color=color,
                    label=f"{mode} (last 50: {sum(losses[-50:]) / 50:.4f})")
        ax.set_title(f"seed {seed}", fontsize=9)
        ax.set_ylim(2.2, 3.2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("HF GPT-2, random init, KJV bytes, batch 16x1024, bf16, NVIDIA H200", fontsize=10)
    fig.supxlabel("step")
    fig.supylabel("cross-entropy (nats per byte)")
    fig.tight_layout()
    path = ROOT / "docs" / "img" / "train_loss_gpt2_seeds.png"
    fig.savefig(path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
