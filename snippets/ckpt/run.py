"""Save a DCP checkpoint with four gloo ranks, load it with two, compare every tensor; then time async_save."""
from __future__ import annotations

import tempfile
import warnings

import torch

from snippets.ckpt import dcp_lab
from snippets.common import gloo


def _quiet():
    warnings.filterwarnings("ignore", message=".*FSDP2-wrapped module.*")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*async_save.*")


def _save(rank: int, world: int, cfg: dict) -> dict:
    _quiet()
    return dcp_lab.save(cfg["path"], cfg["dim"], cfg["layers"], cfg["steps"], cfg["seed"])


def _load(rank: int, world: int, cfg: dict) -> dict:
    _quiet()
    return dcp_lab.load(cfg["path"], cfg["dim"], cfg["layers"], cfg["seed"])


def _skip(rank: int, world: int, cfg: dict) -> dict:
    _quiet()
    return dcp_lab.load(cfg["path"], cfg["dim"], cfg["layers"], cfg["seed"], really=False)


def _async(rank: int, world: int, cfg: dict) -> dict:
    _quiet()
    return dcp_lab.async_roundtrip(cfg["path"], cfg["dim"], cfg["layers"], cfg["seed"], cfg["steps_after"])


def run(save_world: int = 4, load_world: int = 2, dim: int = 32, layers: int = 2, steps: int = 3, seed: int = 0,
        steps_after: int = 2) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = dict(path=f"{tmp}/ckpt", dim=dim, layers=layers, steps=steps, seed=seed, steps_after=steps_after)
        saved = gloo.spawn(_save, save_world, cfg)
        loaded = gloo.spawn(_load, load_world, cfg)
        control = gloo.spawn(_skip, load_world, cfg)
        timed = gloo.spawn(_async, save_world, {**cfg, "path": f"{tmp}/async"})
    want, got = saved[0]["full"], loaded[0]
    exact = set(want) == set(got) and all(torch.equal(want[k], got[k]) for k in want)
    return {"tensors": len(want), "keys_match": set(want) == set(got), "exact": exact,
            "mismatched": sorted(k for k in want if k in got and not torch.equal(want[k], got[k]))[:5],
            "control_differs": any(not torch.equal(want[k], control[0][k]) for k in want),
            "save_s": max(r["save_s"] for r in saved.values()), "async": timed}
