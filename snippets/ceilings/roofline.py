"""The roofline: attainable FLOP/s = min(peak, arithmetic intensity x bandwidth)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np


def gemm_intensity(m: int, n: int, k: int, element_bytes: int) -> float:
    """FLOP per byte of C = A @ B: 2mnk flops over A (m x k), B (k x n) and C (m x n) each moved once."""
    return 2 * m * n * k / (element_bytes * (m * k + k * n + m * n))


def attainable_tflops(intensity: float, peak_tflops: float, bandwidth_gbps: float) -> float:
    """The roof at this intensity: GB/s x FLOP/B = GFLOP/s, hence the / 1000 for TFLOP/s."""
    return min(peak_tflops, intensity * bandwidth_gbps / 1e3)


def ridge_point(peak_tflops: float, bandwidth_gbps: float) -> float:
    """FLOP per byte where the roof turns flat: below it a kernel is memory-bound."""
    return peak_tflops * 1e3 / bandwidth_gbps


def shape_label(m: int, n: int, k: int) -> str:
    return f"{m}³" if m == n == k else f"{m}×{n}×{k}"


def plot_roofline(points: list[tuple[str, str, float, float]], peaks_tflops: dict[str, float],
                  bandwidth_gbps: float):
    """Log-log roof per dtype from the measured peaks and copy bandwidth; points are
    (label, dtype, FLOP/byte, measured TFLOP/s), an empty label drawing no text. Returns the figure."""
    fig, ax = plt.subplots(figsize=(8, 5))
    lo = min([p[2] for p in points] + [1.0]) / 2
    hi = max([p[2] for p in points] + [ridge_point(max(peaks_tflops.values()), bandwidth_gbps)]) * 4
    x = np.geomspace(lo, hi, 256)
    for i, (dtype, peak) in enumerate(peaks_tflops.items()):
        color = f"C{i}"
        ax.plot(x, np.minimum(peak, x * bandwidth_gbps / 1e3), color=color, alpha=0.6,
                label=f"{dtype} roof")
        pts = [p for p in points if p[1] == dtype]
        ax.scatter([p[2] for p in pts], [p[3] for p in pts], color=color, zorder=3)
        for label, _, ai, tflops in pts:
            if label:
                ax.annotate(label, (ai, tflops), textcoords="offset points", xytext=(3, 3), fontsize=7,
                            rotation=30)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(top=max(peaks_tflops.values()) * 4)  # room for the labels above the flat roof
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Roofline from measured ceilings (copy {bandwidth_gbps:.0f} GB/s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    plt.close(fig)  # the caller displays the returned figure; pyplot must not show it a second time
    return fig
