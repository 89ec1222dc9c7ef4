"""Does this machine meet a lab's hardware needs? `unmet` says why not, or None.

A lab that needs sm_90a or two GPUs still opens on a Colab T4: a part it cannot run does
`reason = unmet(...)` and, if there is a reason, shows the verified GPU results instead
(`from kb.results import show; show(STEM, reason)`).
"""
from __future__ import annotations


def capability_ok(have: tuple[int, int] | None, need: str | None) -> bool:
    """need: None, '8.0', '9.0a' ('a' = the arch-specific features of exactly that chip)."""
    if need is None:
        return True
    if have is None:
        return False
    major, minor = (int(x) for x in need.rstrip("a").split("."))
    return have == (major, minor) if need.endswith("a") else have >= (major, minor)


def unmet(gpus: int = 0, capability: str | None = None) -> str | None:
    """Why this machine cannot run the part, or None when it can."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < gpus:
        return f"needs {gpus} GPU(s), this machine has {count}"
    have = torch.cuda.get_device_capability(0) if count else None
    if not capability_ok(have, capability):
        shown = "no GPU" if have is None else f"sm_{have[0]}{have[1]}"
        return f"needs sm_{capability.replace('.', '')}, this machine has {shown}"
    return None
