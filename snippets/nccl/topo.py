"""Read `nvidia-smi topo -m` into a matrix and print it back with the meaning of every code it uses.

The output is tab-separated: a header row of device names (GPU0, GPU1, NIC0, ...) followed by
`CPU Affinity`, `NUMA Affinity`, `GPU NUMA ID`; one row per device; then a legend. nvidia-smi
underlines the header with ANSI escapes and leaves an empty field before `GPU NUMA ID`, so both are
tolerated. A NIC legend (`NIC0: mlx5_0`) maps NIC columns to device names.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from snippets.nccl.messages import catalogue_path, msg

ANSI = re.compile(r"\x1b\[[0-9;]*m")
MAX_DEVICES = 256  # GPUs and NICs of one machine

# The codes of nvidia-smi's own legend (nvidia-smi topo -m); their meanings are in messages/<lang>.yml
# (topo.legend), used when the text does not carry its legend, and in any language but nvidia-smi's own.
LEGEND_CODES = ("X", "SYS", "NODE", "PHB", "PXB", "PIX", "NV#")
NVIDIA_SMI_LANG = "en"  # the language nvidia-smi prints its legend in


@dataclass
class TopoMatrix:
    gpus: list[str]
    matrix: dict[tuple[str, str], str]
    affinity: dict[str, dict[str, str]]
    nics: list[str] = field(default_factory=list)
    nic_names: dict[str, str] = field(default_factory=dict)   # NIC0 -> mlx5_0
    legend: dict[str, str] = field(default_factory=dict)      # as printed in the text, else empty

    @property
    def devices(self) -> list[str]:
        return self.gpus + self.nics

    def link(self, a: str, b: str) -> str | None:
        return self.matrix.get((a, b))

    def meaning(self, code: str, lang: str = "en") -> str:
        """'NV18' -> 'Connection traversing a bonded set of 18 NVLinks'."""
        table = {c: msg(lang, f"topo.legend.{c}") for c in LEGEND_CODES}
        if catalogue_path(lang) == catalogue_path(NVIDIA_SMI_LANG):
            table.update(self.legend)  # the text's own wording, where it carries a legend
        if code in table:
            return table[code]
        m = re.fullmatch(r"NV(\d+)", code)
        if m and "NV#" in table:
            return table["NV#"].replace("#", m[1])
        return msg(lang, "topo.unknown_code")

    def render(self, lang: str = "en") -> str:
        devs = self.devices
        extra = list(dict.fromkeys(k for v in self.affinity.values() for k in v))
        header = [""] + devs + extra
        rows = [[d] + [self.matrix.get((d, e), "") for e in devs]
                + [self.affinity.get(d, {}).get(k, "") for k in extra] for d in devs]
        widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header] + rows]
        used = []
        for d in devs:
            for e in devs:
                code = self.matrix.get((d, e))
                if code and code not in used:
                    used.append(code)
        lines += ["", msg(lang, "topo.legend_title")]
        lines += [f"  {code:<5}= {self.meaning(code, lang)}" for code in used]
        if self.nic_names:
            lines += [f"  {nic}: {name}" for nic, name in self.nic_names.items()]
        return "\n".join(lines)


def is_topo(text: str) -> bool:
    return bool(re.search(r"^[^\S\n]*GPU0\b", ANSI.sub("", text), re.M)) and "Affinity" in text


def parse(text: str) -> TopoMatrix:
    lines = [ANSI.sub("", ln).rstrip("\n") for ln in text.splitlines()]
    header_at = next((i for i, ln in enumerate(lines) if re.match(r"^\s*GPU0\t", ln)), None)
    if header_at is None:
        raise ValueError("not `nvidia-smi topo -m` output: no header row starting with GPU0")
    header = [c.strip() for c in lines[header_at].split("\t")]
    header = header[1:] if header and header[0] == "" else header
    k = next((i for i, c in enumerate(header) if "Affinity" in c or "NUMA" in c), len(header))
    devs, extra = [c for c in header[:k] if c], [c for c in header[k:] if c]
    if len(devs) > MAX_DEVICES:
        raise ValueError(f"not `nvidia-smi topo -m` output: {len(devs)} columns, more than {MAX_DEVICES} devices")
    matrix, affinity = {}, {}
    for ln in lines[header_at + 1:]:
        cells = [c.strip() for c in ln.split("\t")]
        if not cells or cells[0] not in devs:
            if ln.strip().startswith("Legend"):
                break
            continue
        name, values = cells[0], cells[1:]
        for other, code in zip(devs, values):
            matrix[(name, other)] = code
        rest = [v for v in values[len(devs):] if v]
        if rest and name.startswith("GPU"):
            affinity[name] = dict(zip(extra, rest))
    legend, nic_names = {}, {}
    for ln in lines:
        m = re.match(r"^\s+(X|SYS|NODE|PHB|PXB|PIX|NV#)\s+= (.+)$", ln)
        if m:
            legend[m[1]] = m[2].strip()
        m = re.match(r"^\s+(NIC\d+): (\S+)", ln)
        if m:
            nic_names[m[1]] = m[2]
    gpus = [d for d in devs if d.startswith("GPU")]
    return TopoMatrix(gpus=gpus, matrix=matrix, affinity=affinity, nics=[d for d in devs if d not in gpus],
                      nic_names=nic_names, legend=legend)
