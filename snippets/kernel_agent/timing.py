"""Times the harness can trust: the launcher's per-call times, held to the harness's own clock.

The launcher runs inside the candidate's process, so the times it reports could be forged. The harness
brackets the whole timed request with its own clock; the honest launcher's share of that interval
(inputs, digests, the pipe) is known from the baseline, timed the same way in a sandbox no candidate
has touched. Time the candidate's calls report short of the harness's clock, beyond that share and a
margin, is time it hid: the candidate is rejected. A forger can shave at most the margin.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

CPU_NOTE = "CPU perf_counter (Triton interpreter): says nothing about kernel speed"
CUDA_NOTE = ("CUDA events around each call and a device-wide synchronize, each call on inputs of its own, "
             "median; held to the harness's clock")
MARGIN = 0.02  # of the harness's interval; on the H200 the launcher's share varied by about 1 % run to run
SLACK_MS = {"cpu": 25.0, "cuda": 1.0}  # scheduling noise of one request
REPEATS = 3  # timed requests of the baseline; the first warms up, the largest share of the others is the allowance


@dataclass(frozen=True)
class Measured:
    times: list  # per-call ms, as the launcher reported them
    wall_ms: float  # the harness's clock around the whole request

    @property
    def unexplained_ms(self) -> float:
        return self.wall_ms - sum(self.times)


@dataclass(frozen=True)
class Baseline:
    runs: list  # Measured, one per timed request of the eager baseline, in a sandbox no candidate touched

    @property
    def times(self) -> list:
        return self.runs[0].times

    @property
    def launcher_ms(self) -> float:
        """The honest launcher's own work in a timed request (inputs, outputs, digests, the pipe): the most seen."""
        return max(max(r.unexplained_ms for r in self.runs[1:] or self.runs), 0.0)


def unexplained(candidate: Measured, baseline: Baseline, device: str) -> str | None:
    """Why the candidate's reported times cannot be true, or None."""
    allowed = 1.05 * baseline.launcher_ms + MARGIN * candidate.wall_ms + SLACK_MS[device.split(":")[0]]
    if candidate.unexplained_ms <= allowed:
        return None
    return (f"its calls reported {sum(candidate.times):.3g} ms in all, the harness's clock measured "
            f"{candidate.wall_ms:.3g} ms, and the launcher's own work explains at most {allowed:.3g} ms")


def median(times: list[float]) -> float:
    return statistics.median(times)
