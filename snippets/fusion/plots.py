"""The fusion lab's two figures: effective bandwidth against hidden size with the copy ceiling drawn, and time
bars for the cases where fusion loses (each case's bars divided by its unfused time)."""
from __future__ import annotations

import matplotlib.pyplot as plt


def plot_bandwidth(rows: list[dict], copy_gbps: float, title: str, variants=("triton", "cuda", "compile", "eager")):
    """rows: layernorm_forward/backward results; one line per variant present, x = hidden size."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for v in variants:
        pts = [(r["n"], r["gbps"][v]) for r in rows if v in r["gbps"]]
        if pts:
            ax.plot(*zip(*pts), "o-", label=v)
    ax.axhline(copy_gbps, color="gray", linestyle="--", label=f"copy ceiling {copy_gbps:.0f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("hidden size N")
    ax.set_ylabel("effective GB/s (fused bytes / time)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    plt.show()


def plot_slowdowns(cases: dict[str, dict[str, float]], baseline: dict[str, str]):
    """cases: {case: {variant: ms}}; baseline: {case: the variant the others are divided by}."""
    fig, ax = plt.subplots(figsize=(8, 4))
    x = 0
    ticks, labels = [], []
    for case, ms in cases.items():
        base = ms[baseline[case]]
        for i, (variant, t) in enumerate(ms.items()):
            bar = ax.bar(x + i, t / base, color=f"C{i}")
            ax.bar_label(bar, labels=[f"{variant}\n{t:.3g} ms"], fontsize=6, rotation=90, padding=2)
        ticks.append(x + (len(ms) - 1) / 2)
        labels.append(case)
        x += len(ms) + 1
    ax.axhline(1.0, color="gray", linestyle=":")
    ax.set_xticks(ticks, labels)
    ax.set_ylabel("time / unfused time")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.35)
    ax.set_title("When fusion loses: time relative to the unfused kernels")
    fig.tight_layout()
    plt.show()
