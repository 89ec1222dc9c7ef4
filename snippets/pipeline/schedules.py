"""Pipeline schedules as data: for p devices and m micro-batches, each device's ordered list of operations
(F forward, B backward, and for zero-bubble B split into B = input gradient and W = weight gradient), and a
simulator that runs the lists with unit costs, respecting the dependencies, to measure the bubble (idle time)
and the peak number of micro-batches whose activations a device holds."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Op:
    kind: str  # "F", "B" (whole backward, or input gradient when the schedule has W) or "W"
    mb: int  # micro-batch
    chunk: int = 0  # model chunk on this device (interleaved: virtual stage = chunk * p + device)


# --8<-- [start:gpipe_1f1b]
def gpipe(p: int, m: int) -> list[list[Op]]:
    """GPipe: every forward, then every backward; a device holds all m micro-batches' activations."""
    return [[Op("F", j) for j in range(m)] + [Op("B", j) for j in range(m)] for _ in range(p)]


def one_f_one_b(p: int, m: int) -> list[list[Op]]:
    """1F1B (PipeDream-Flush): device d runs p-d-1 warm-up forwards, then alternates one forward and one
    backward, then drains the remaining backwards. Same bubble as GPipe, at most p-d micro-batches held."""
    out = []
    for d in range(p):
        warm = min(p - d - 1, m)
        ops = [Op("F", j) for j in range(warm)]
        for i in range(m - warm):  # steady state: F of micro-batch warm+i, then B of micro-batch i
            ops += [Op("F", warm + i), Op("B", i)]
        ops += [Op("B", j) for j in range(m - warm, m)]  # cool-down
        out.append(ops)
    return out
# --8<-- [end:gpipe_1f1b]


# --8<-- [start:interleaved]
def interleaved(p: int, m: int, v: int) -> list[list[Op]]:
    """Megatron-LM's interleaved 1F1B: device d holds v chunks (virtual stages d, p+d, ..., (v-1)p+d). It walks
    its m*v (micro-batch, chunk) forwards in groups of p micro-batches per chunk, with (p-d-1)*2 + (v-1)*p
    warm-up forwards, then 1F1B, backwards visiting the chunks in reverse. Needs m % p == 0."""
    assert m % p == 0, "Megatron's interleaved schedule needs the micro-batch count to be a multiple of p"
    total = m * v

    def unit(k: int, forward: bool) -> Op:
        group, within = divmod(k, p * v)
        chunk = within // p
        return Op("F" if forward else "B", group * p + within % p, chunk if forward else v - 1 - chunk)

    out = []
    for d in range(p):
        warm = min((p - d - 1) * 2 + (v - 1) * p, total)
        ops = [unit(k, True) for k in range(warm)]
        for i in range(total - warm):
            ops += [unit(warm + i, True), unit(i, False)]
        ops += [unit(k, False) for k in range(total - warm, total)]
        out.append(ops)
    return out
# --8<-- [end:interleaved]


# --8<-- [start:zb_h1]
def zb_h1(p: int, m: int) -> list[list[Op]]:
    """ZB-H1 (Qi et al. 2024): the backward splits into B (input gradient, on the critical path between stages)
    and W (weight gradient, needed by no other stage). Device d keeps 1F1B's order of F and B but runs each W d
    micro-batches late: the B's travel up the pipeline sooner, and the deferred W's fill the drain. Device d
    then holds p-d micro-batches before their B plus d waiting for their W: p, 1F1B's first-device peak."""
    out = []
    for d in range(p):
        warm = min(p - d - 1, m)
        ops, waiting = [Op("F", j) for j in range(warm)], []
        for i in range(m):
            if warm + i < m:
                ops.append(Op("F", warm + i))
            ops.append(Op("B", i))
            waiting.append(i)
            if len(waiting) > d or warm + i >= m:  # steady state: W d late; drain: one W after each B
                ops.append(Op("W", waiting.pop(0)))
        ops += [Op("W", j) for j in waiting]
        out.append(ops)
    return out
# --8<-- [end:zb_h1]


# --8<-- [start:simulate]
def simulate(sched: list[list[Op]], cost: dict[str, int]) -> dict:
    """Run each device's list in order; an op starts when its device is free and its inputs exist: F needs the
    previous virtual stage's F, B the next one's B (the last stage's B its own F), W its own B. Returns the
    start times, the makespan, the bubble fraction and each device's peak held micro-batches (in whole-stage
    units: a chunk's activations count 1/v; released at B, or at W when the schedule splits the backward)."""
    p = len(sched)
    v = 1 + max(op.chunk for ops in sched for op in ops)
    last = v * p - 1
    split = any(op.kind == "W" for ops in sched for op in ops)
    end: dict[tuple, int] = {}  # (kind, mb, virtual stage) -> finish time
    start: list[list[int]] = [[] for _ in range(p)]
    free, pos = [0] * p, [0] * p
    while any(pos[d] < len(sched[d]) for d in range(p)):
        progressed = False
        for d in range(p):
            while pos[d] < len(sched[d]):
                op = sched[d][pos[d]]
                s = op.chunk * p + d
                need = {"F": [("F", op.mb, s - 1)] if s > 0 else [],
                        "B": [("F", op.mb, s)] + ([("B", op.mb, s + 1)] if s < last else []),
                        "W": [("B", op.mb, s)]}[op.kind]
                if any(k not in end for k in need):
                    break
                t0 = max([free[d]] + [end[k] for k in need])
                free[d] = end[(op.kind, op.mb, s)] = t0 + cost[op.kind]
                start[d].append(t0)
                pos[d] += 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"deadlock: devices wait on each other at {pos}")
    makespan, work = max(free), sum(cost[op.kind] for ops in sched for op in ops)
    release = "W" if split else "B"
    peak = []
    for ops in sched:
        held = top = 0
        for op in ops:
            held += (op.kind == "F") - (op.kind == release)
            top = max(top, held)
        peak.append(top / v)
    return {"start": start, "makespan": makespan, "bubble": 1 - work / (p * makespan), "peak_held": peak}
# --8<-- [end:simulate]


# --8<-- [start:formulas]
def bubble_formula(name: str, p: int, m: int, v: int = 1, tf: int = 1, tb: int = 1, tw: int = 1) -> float:
    """Idle fraction of the whole run. GPipe and 1F1B: (p-1)/(m+p-1) (Huang et al. 2019; Narayanan et al.
    2021 write it as (p-1)/m of the ideal time). Interleaved with v chunks: the warm-up and drain shrink by v,
    (p-1)/(v*m+p-1). ZB-H1 (tb = T_B_in, the input-gradient half of the backward): a bubble of
    (p-1)(T_F+T_B_in-T_W) next to m(T_F+T_B_in+T_W) of work (Qi et al. 2024), for m >= p."""
    if name in ("gpipe", "1f1b"):
        return (p - 1) / (m + p - 1)
    if name == "interleaved":
        return (p - 1) / (v * m + p - 1)
    if name == "zb_h1":
        idle = (p - 1) * (tf + tb - tw)
        return idle / (m * (tf + tb + tw) + idle)
    raise ValueError(name)


def held_formula(name: str, p: int, m: int, d: int, v: int = 1) -> float:
    """Peak micro-batches whose activations device d holds: GPipe m; 1F1B min(p-d, m); ZB-H1 min(p, m) on every
    device (until its W); interleaved
    (warm-up + 1) chunks of 1/v each, 2(p-d-1) + (v-1)p + 1 of them: p + (p-1)/v on the first device."""
    if name == "gpipe":
        return m
    if name == "1f1b":
        return min(p - d, m)
    if name == "zb_h1":
        return min(p, m)
    if name == "interleaved":
        return min(2 * (p - d - 1) + (v - 1) * p + 1, m * v) / v
    raise ValueError(name)
# --8<-- [end:formulas]


def timeline(sched: list[list[Op]], cost: dict[str, int]) -> str:
    """One text row per device, one character per time unit, '.' for idle: an op's first cell shows its
    micro-batch's last digit, its further cells its kind (F, B, W; lower case for odd chunks)."""
    res = simulate(sched, cost)
    rows = []
    for d, ops in enumerate(sched):
        cells = ["."] * res["makespan"]
        for op, t0 in zip(ops, res["start"][d]):
            mark = {"F": "F", "B": "B", "W": "W"}[op.kind]
            mark = mark.lower() if op.chunk % 2 else mark  # odd chunks in lower case
            for k in range(cost[op.kind]):
                cells[t0 + k] = mark if k else str(op.mb % 10)
        rows.append(f"dev{d} |" + "".join(cells) + "|")
    return "\n".join(rows)
