"""Pure-Python models of the schedules the kernels follow: the order of tiles of the persistent steps
(the same function as csrc/tile_order.cuh) and a timeline of producer and consumer warpgroups, computed
from the pipeline's rules, for the lab's picture. No GPU and no timing here: only the rules."""
from __future__ import annotations


def grouped_tile(t: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[int, int]:
    """Tile (row, column) computed t-th: GROUP_M tile rows are swept column by column (tile_order.cuh)."""
    per_group = group_m * tiles_n
    first_m = (t // per_group) * group_m
    rows = min(tiles_m - first_m, group_m)  # the last group may be short
    in_group = t % per_group
    return first_m + in_group % rows, in_group // rows


def persistent_assignment(tiles_m: int, tiles_n: int, ctas: int, group_m: int) -> list[list[tuple[int, int]]]:
    """The tiles each persistent CTA computes, in order: CTA i takes t = i, i + ctas, i + 2 ctas, ..."""
    tiles = tiles_m * tiles_n
    return [[grouped_tile(t, tiles_m, tiles_n, group_m) for t in range(i, tiles, ctas)]
            for i in range(min(ctas, tiles))]


def wave_footprint(tiles_m: int, tiles_n: int, ctas: int, group_m: int, wave: int = 0) -> tuple[int, int]:
    """Distinct A row blocks and B column blocks touched by the `wave`-th set of `ctas` concurrent tiles:
    what L2 must hold for that wave (group_m = 1 is plain row-major order)."""
    ts = range(wave * ctas, min((wave + 1) * ctas, tiles_m * tiles_n))
    coords = [grouped_tile(t, tiles_m, tiles_n, group_m) for t in ts]
    return len({m for m, _ in coords}), len({n for _, n in coords})


def pipeline_timeline(k_tiles: int, stages: int, tiles: int = 2, load: float = 3.0, mma: float = 1.0,
                      issue: float = 0.15, epilogue: float = 1.5, consumers: int = 2) -> list[dict]:
    """Events of one CTA of the warp-specialised kernel (steps 3-4), by the pipeline's rules:
    the producer may refill stage s only after the consumers released the slab that used it STAGES slabs
    ago (empty barrier); a slab can be multiplied once its bytes have landed (full barrier) and the
    consumers are free; the consumers write C after a tile's last slab while the producer runs on.
    Returns [{lane, start, duration, kind, label}] in arbitrary time units (load / mma = the ratio)."""
    events, release, issue_end, consumer_free = [], [], 0.0, 0.0
    for it in range(tiles * k_tiles):
        s, tile, kt = it % stages, it // k_tiles, it % k_tiles
        start = max(issue_end, release[it - stages] if it >= stages else 0.0)  # wait empty[s]
        events.append({"lane": "producer", "start": start, "duration": issue, "kind": "issue",
                       "label": f"s{s}"})
        issue_end = start + issue
        landed = issue_end + load  # complete_tx: the full barrier's phase completes here
        events.append({"lane": f"TMA -> stage {s}", "start": issue_end, "duration": load, "kind": "tma",
                       "label": f"t{tile}k{kt}"})
        begin = max(landed, consumer_free)  # wait full[s]
        for c in range(consumers):
            events.append({"lane": f"consumer {c}", "start": begin, "duration": mma, "kind": "mma",
                           "label": f"k{kt}"})
        consumer_free = begin + mma
        release.append(consumer_free)  # arrive empty[s]
        if kt == k_tiles - 1:
            for c in range(consumers):
                events.append({"lane": f"consumer {c}", "start": consumer_free, "duration": epilogue,
                               "kind": "epilogue", "label": "C"})
            consumer_free += epilogue
    return events


def serial_timeline(k_tiles: int, load: float = 3.0, mma: float = 1.0, issue: float = 0.15,
                    epilogue: float = 1.5) -> list[dict]:
    """Step 1 for comparison: one buffer, so every load waits for the previous multiply and vice versa."""
    events, t = [], 0.0
    for kt in range(k_tiles):
        events.append({"lane": "warpgroup 0", "start": t, "duration": issue, "kind": "issue", "label": ""})
        events.append({"lane": "TMA -> stage 0", "start": t + issue, "duration": load, "kind": "tma",
                       "label": f"k{kt}"})
        t += issue + load
        events.append({"lane": "warpgroup 0", "start": t, "duration": mma, "kind": "mma", "label": f"k{kt}"})
        t += mma
    events.append({"lane": "warpgroup 0", "start": t, "duration": epilogue, "kind": "epilogue", "label": "C"})
    return events


def busy_fraction(events: list[dict], lane_prefix: str = "consumer 0", kind: str = "mma") -> float:
    """Share of the timeline's span during which `lane_prefix` runs `kind` (tensor-core busy time)."""
    end = max(e["start"] + e["duration"] for e in events)
    busy = sum(e["duration"] for e in events if e["lane"].startswith(lane_prefix) and e["kind"] == kind)
    return busy / end


def plot_timelines(panels: dict[str, list[dict]], path: str | None = None):
    """One horizontal bar chart per schedule: lanes top to bottom, colour by kind."""
    import matplotlib.pyplot as plt

    colours = {"issue": "#d62728", "tma": "#9ecae1", "mma": "#2ca02c", "epilogue": "#ff7f0e"}
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 1.1 + 0.45 * sum(
        len({e["lane"] for e in ev}) for ev in panels.values())), squeeze=False)
    span = max(e["start"] + e["duration"] for ev in panels.values() for e in ev)
    for ax, (title, events) in zip(axes[:, 0], panels.items()):
        lanes = list(dict.fromkeys(e["lane"] for e in sorted(events, key=lambda e: (
            not e["lane"].startswith(("producer", "warpgroup")), not e["lane"].startswith("TMA"), e["lane"]))))
        for e in events:
            y = lanes.index(e["lane"])
            ax.broken_barh([(e["start"], e["duration"])], (y - 0.4, 0.8), color=colours[e["kind"]],
                           edgecolor="white", linewidth=0.5)
            if e["label"] and e["duration"] > 0.6:
                ax.text(e["start"] + e["duration"] / 2, y, e["label"], ha="center", va="center", fontsize=7)
        ax.set_yticks(range(len(lanes)), lanes)
        ax.invert_yaxis()
        ax.set_xlim(0, span)
        ax.set_title(title, fontsize=10)
    axes[-1, 0].set_xlabel("time (units: one slab's wgmma = 1)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    fig.legend(handles, ["TMA issue (1 thread)", "TMA copy in flight", "wgmma", "epilogue (write C)"],
               loc="lower center", ncol=4, fontsize=8, bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    if path:
        fig.savefig(path, dpi=120)
    return fig
