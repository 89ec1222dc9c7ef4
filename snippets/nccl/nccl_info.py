"""Read an NCCL_DEBUG=INFO log: version, rank, transports, channels, rings, trees, topology, COLL lines.

NCCL prefixes every line with `host:pid:tid [cudaDev]` and then `NCCL INFO`, or, for a warning,
`file.cc:line NCCL WARN` (optionally after a timestamp, and after whatever a launcher puts in front,
such as torchrun's `[default0]:`). What each part of the INIT, GRAPH, NET and COLL output means:

- `NCCL version 2.28.9+cuda13.0`: the library the process loaded (PyTorch wheels bundle their own).
- `ncclCommInitRankConfig comm 0x.. rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 ..`: one per
  communicator; its rank, size, the GPU, and the GPU's PCI bus id.
- `Using network Socket` / `Using network IB`: the transport NCCL would use *between nodes*.
- `Channel 00/24 : 0 1`: the ring order of channel 0 of 24 (printed by rank 0).
- `Trees [0] 1/-1/-1->0->-1 ...`: per channel, this rank's tree neighbours `down0/down1/down2->me->up`.
- `Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM`: one connection to a peer and its transport:
  P2P/CUMEM (GPU memory exported with cuMem*), P2P/IPC (cudaIpc handles), P2P/direct pointer
  (peers in one process), SHM (through host shared memory), NET/Socket or NET/IB (the network).
- `=== System : maxBw .. ===` ... `=====`: NCCL's topology model (SUBSYS GRAPH), link bandwidths in GB/s.
- `AllReduce: opCount 0 sendbuff .. count 1024 datatype 7 op 0 root 0 comm .. [nranks=2]`: one line
  per collective at *enqueue* time (SUBSYS COLL). It has no timing; it shows what each rank issued.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from snippets.nccl.messages import msg

LINE = re.compile(r"(?<![^\s:\]])(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
                  r"(?:(?P<where>\S+:\d+)(?: \((?P<func>[^)]*)\))? )?"
                  r"NCCL (?P<level>INFO|WARN|ATTN|TRACE|CALL) ?(?P<msg>.*)$")
VERSION = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+)(?:\+cuda(?P<cuda>[\d.]+))?")
INIT = re.compile(r"(?P<fn>ncclCommInit\w*|ncclCommSplit\w*) comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d{1,9}) "
                  r"nranks (?P<nranks>\d{1,9}) cudaDev (?P<dev>\d{1,9})(?: nvmlDev \d+)? busId (?P<bus>[0-9a-fA-F:.]+)"
                  r"(?: commId (?P<commid>0x[0-9a-f]+))?")
RING = re.compile(r"^Channel (?P<ch>\d+)/(?P<n>\d{1,9}) : (?P<order>\d+(?: \d+)*)\s*$")
CONNECT = re.compile(r"^Channel (?P<ch>\d+)(?:/\d+)? : (?P<src>\d+)\[[0-9a-fx]+\] -> (?P<dst>\d+)\[[0-9a-fx]+\]"
                     r"(?: \[(?P<dir>send|receive)\])? via (?P<via>.+)$")
TREES = re.compile(r"\[(?P<ch>\d+)\] (?P<spec>\S+)")
COLL = re.compile(r"^(?P<op>[A-Za-z]+): opCount (?P<opcount>(?:0x)?[0-9a-fA-F]{1,16}) sendbuff (?P<send>\S+) "
                  r"recvbuff (?P<recv>\S+) count (?P<count>\d{1,18}) datatype (?P<dt>\d{1,9}) op (?P<redop>\d{1,9}) "
                  r"root (?P<root>-?\d{1,9}) comm (?P<comm>\S+)(?: \[nranks=(?P<nranks>\d{1,9})\])?")
CHANNELS = re.compile(r"^(?P<coll>\d{1,9}) coll channels, .*?(?<!\d)(?P<nvls>\d{1,9}) nvls channels")
NETWORK = re.compile(r"^Using network (?P<net>.+)$")

# ncclDataType_t and ncclRedOp_t (nccl.h)
DATATYPES = {0: "int8", 1: "uint8", 2: "int32", 3: "uint32", 4: "int64", 5: "uint64", 6: "float16",
             7: "float32", 8: "float64", 9: "bfloat16", 10: "float8e4m3", 11: "float8e5m2"}
REDOPS = {0: "sum", 1: "prod", 2: "max", 3: "min", 4: "avg"}
BASE_TRANSPORTS = ("P2P/CUMEM", "P2P/IPC", "P2P/direct pointer", "SHM", "NET/Socket", "NET/IB")


def transport_name(via: str) -> str:
    """'P2P/CUMEM/read' -> 'P2P/CUMEM'; 'NET/IB/0(1)/GDRDMA' -> 'NET/IB'; 'SHM/direct/direct' -> 'SHM'."""
    parts = via.strip().split("/")
    if parts[0] in ("P2P", "NET") and len(parts) > 1:
        return f"{parts[0]}/{parts[1]}"
    return parts[0]


@dataclass
class NcclInfo:
    version: str | None = None
    rank: int | None = None
    nranks: int | None = None
    cuda_dev: int | None = None
    bus_id: str | None = None
    transports: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BASE_TRANSPORTS, 0))
    nchannels: int | None = None
    trees: list[str] = field(default_factory=list)
    rings: list[str] = field(default_factory=list)
    network: str | None = None
    nvls: bool | None = None
    warnings: list[str] = field(default_factory=list)
    topology: list[str] = field(default_factory=list)
    colls: list[dict] = field(default_factory=list)
    cuda: str | None = None               # the CUDA NCCL was built for ('13.0')
    comms: list[dict] = field(default_factory=list)  # every ncclCommInit*/Split line
    topo_max_bw: float | None = None      # GB/s, from '=== System : maxBw ...'
    recognised: int = 0                   # lines with an NCCL prefix

    def used_transports(self) -> dict[str, int]:
        return {k: v for k, v in self.transports.items() if v}

    def summary(self, lang: str = "en") -> str:
        return _summary(self, lang)


def is_nccl_line(line: str) -> bool:
    return bool(LINE.search(line)) or line.lstrip().startswith("NCCL version ")


def is_nccl_log(text: str) -> bool:
    """True when some line carries NCCL's `host:pid:tid [dev] NCCL LEVEL` prefix or a version banner."""
    return any(is_nccl_line(ln) for ln in text.splitlines())


def parse_file(path) -> NcclInfo:
    """`parse` of a file, streamed line by line (long lines cut, as the doctor reads logs)."""
    from snippets.nccl.evidence import read_lines

    return parse(line for _, line in read_lines(path))


def parse(text) -> NcclInfo:
    """Read a log's text, or its lines (any iterable of strings without line ends)."""
    info = NcclInfo()
    in_topo = topo_done = False
    rings_done = False
    for raw in text.splitlines() if isinstance(text, str) else text:
        m = LINE.search(raw) if "NCCL" in raw else None
        if not m:
            v = VERSION.match(raw.strip())   # NCCL_DEBUG=VERSION prints the banner without a prefix
            if v and info.version is None:
                info.version, info.cuda = v["v"], v["cuda"]
                info.recognised += 1
            continue
        info.recognised += 1
        level, msg = m["level"], m["msg"]
        if level in ("WARN", "ATTN"):
            info.warnings.append(raw[m.start():].strip())
            continue
        if in_topo:
            if msg.startswith("====="):
                in_topo, topo_done = False, True
            else:
                info.topology.append(msg)
            continue
        if msg.startswith("=== System :"):
            if not topo_done:
                in_topo = True
                info.topology.append(msg)
                bw = re.search(r"maxBw ([\d.]+)", msg)
                info.topo_max_bw = float(bw[1]) if bw else None
            continue
        if (v := VERSION.search(msg)) and info.version is None:
            info.version, info.cuda = v["v"], v["cuda"]
        elif i := INIT.search(msg):
            comm = dict(comm=i["comm"], rank=int(i["rank"]), nranks=int(i["nranks"]), cuda_dev=int(i["dev"]),
                        bus_id=i["bus"], comm_id=i["commid"])
            if not any(c["comm"] == comm["comm"] for c in info.comms):
                info.comms.append(comm)
            if info.rank is None:
                info.rank, info.nranks, info.cuda_dev, info.bus_id = (
                    comm["rank"], comm["nranks"], comm["cuda_dev"], comm["bus_id"])
        elif n := NETWORK.match(msg):
            info.network = info.network or n["net"].rstrip()
        elif c := CONNECT.match(msg):
            name = transport_name(c["via"])
            info.transports[name] = info.transports.get(name, 0) + 1
        elif r := RING.match(msg):
            rings_done = rings_done or (r["ch"] == "00" and bool(info.rings))  # a second communicator
            if not rings_done:
                info.rings.append(r["order"])
                info.nchannels = info.nchannels or int(r["n"])
        elif msg.startswith("Trees ") and not info.trees:
            info.trees = [t["spec"] for t in TREES.finditer(msg)]
        elif ch := CHANNELS.match(msg):
            info.nchannels = info.nchannels or int(ch["coll"])
            if int(ch["nvls"]) > 0:
                info.nvls = True
            elif info.nvls is None:
                info.nvls = False
        elif "NCCL_NVLS_ENABLE set by environment to 0" in msg or "NVLS multicast support is not available" in msg:
            info.nvls = False
        elif msg.startswith("NVLS comm ") or "NVLS multicast support is available" in msg:
            info.nvls = True
        elif co := COLL.match(msg):
            dt, redop = int(co["dt"]), int(co["redop"])
            info.colls.append(dict(op=co["op"], opCount=int(co["opcount"], 16), count=int(co["count"]),
                                   datatype=dt, dtype=DATATYPES.get(dt, str(dt)), redop=REDOPS.get(redop, str(redop)),
                                   root=int(co["root"]), comm=co["comm"],
                                   nranks=int(co["nranks"]) if co["nranks"] else None))
    if info.nchannels is None and info.trees:
        info.nchannels = len(info.trees)
    return info


LINK_KINDS = {"NVL": "NVLink", "PCI": "PCIe", "NET": "network", "SYS": "CPU-to-CPU", "C2C": "chip-to-chip",
              "NVS": "NVSwitch"}


def _topology_links(info: NcclInfo) -> list[str]:
    """Link kinds in NCCL's topology block, e.g. ['NVL (NVLink)', 'PCI (PCIe)']."""
    kinds = []
    for line in info.topology:
        for k in re.findall(r"\b(NVL|PCI|NET|SYS|C2C)\[", line) + re.findall(r"\b(NVS)/", line):
            if k not in kinds:
                kinds.append(k)
    return [f"{k} ({LINK_KINDS[k]})" for k in kinds]


def _colls_text(info: NcclInfo, lang: str) -> str:
    counts = Counter((c["op"], c["count"], c["dtype"]) for c in info.colls)
    return msg(lang, "nccl_info.sep").join(msg(lang, "nccl_info.coll", op=op, times=k, count=count, dtype=dtype)
                                           for (op, count, dtype), k in counts.items())


def _opcount_stuck(info: NcclInfo) -> bool:
    """True when several COLL lines share one opCount (NCCL 2.28.9 printed 0 on every line)."""
    return len(info.colls) > 1 and len({c["opCount"] for c in info.colls}) == 1


def _summary(info: NcclInfo, lang: str) -> str:
    """One paragraph: the sentences of messages/<lang>.yml (nccl_info.*) that the log has facts for."""
    def m(key: str, **values) -> str:
        return msg(lang, f"nccl_info.{key}", **values)
    if not info.recognised:
        return m("not_nccl")
    end = m("end")
    out = [m("version", version=info.version or m("version_missing"))
           + (m("built_for", cuda=info.cuda) if info.cuda else "") + end]
    if info.rank is not None:
        out.append(m("rank", rank=info.rank, nranks=info.nranks, cuda_dev=info.cuda_dev, bus_id=info.bus_id)
                   + (m("communicators", comms=len(info.comms)) if len(info.comms) > 1 else "") + end)
    used = info.used_transports()
    if used:
        out.append(m("peers") + m("sep").join(m("peer", transport=k, count=v) for k, v in used.items()) + end)
    if info.nchannels:
        out.append(m("channels", channels=info.nchannels) + (m("ring", ring=info.rings[0]) if info.rings else "")
                   + (m("tree", tree=info.trees[0]) if info.trees else "") + end)
    if info.network:
        net = m("network", network=info.network)
        if used and not any(k.startswith("NET/") for k in used):
            net += m("network_unused")
        out.append(net + end)
    if info.nvls is not None:
        out.append(m("nvls_on") if info.nvls else m("nvls_off"))
    links = _topology_links(info)
    if info.topology:
        out.append(m("topology_bw", max_bw=info.topo_max_bw) if info.topo_max_bw is not None else m("topology"))
        out[-1] += m("links", links=", ".join(links)) if links else end
    if info.colls:
        out.append(m("colls", lines=len(info.colls), colls=_colls_text(info, lang))
                   + (m("opcount_stuck", opcount=info.colls[0]["opCount"]) if _opcount_stuck(info) else "") + end)
    out.append(m("warns", warns=len(info.warnings)) + (m("first_warn", warn=info.warnings[0]) if info.warnings else "")
               + end)
    return m("join").join(out)
