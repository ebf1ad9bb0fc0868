"""Rebuild the tables of predictions.md from NCCL's cost model as hccl-bench ports it
(hcclsim.sweeping.library; run from the repository with the package installed):
    python validation/nccl_model/gen_predictions.py > /tmp/tables.md   (then paste under "## Tables")

One-node and H100 multi-node inputs are derived from the presets (library.comm_of); the DGX-A100 and
DGX-B200 multi-node inputs, which no preset models, are the hand-run search results of constants.md."""
from dataclasses import replace

from hcclsim.network.config import load_topology
from hcclsim.sweeping import library as L

SIZES = [8, 64, 1 << 10, 8 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20,
         64 << 20, 256 << 20, 1 << 30, 4 << 30]
ORDER = [(a, p) for a in (L.TREE, L.RING, L.NVLS, L.NVLS_TREE) for p in L.PROTOS]


def fmt_size(n):
    for unit, s in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= s and n % s == 0:
            return "%d %s" % (n // s, unit)
    return "%d B" % n


def choice(comm, func, n):
    table = L.cost_table(comm, func, n)
    return min(ORDER, key=lambda k: (table.get(k, float("inf")), ORDER.index(k))), table


def section(title, comm, func, note=""):
    combos = [k for k in ORDER if (func, *k) in L.model(comm)]
    g = {a: "%dx%g/%g" % (x.channels, x.bw_intra, x.bw_inter) for a, x in comm.graphs.items()}
    out = ["### " + title, ""] + ([note, ""] if note else [])
    out += ["nRanks=%d nNodes=%d cc=%d comm.nChannels=%d nvlsChannels=%d | graphs (nCh x bwIntra/bwInter): %s" % (
        comm.nranks, comm.nnodes, comm.cc, comm.nchannels, comm.nvls_channels,
        ", ".join("%s %s" % kv for kv in g.items())), ""]
    out += ["| algo/proto | latency (us) | model bw (GB/s, algbw units) |", "|---|---:|---:|"]
    out += ["| %s/%s | %.2f | %.2f |" % (a, p, L.model(comm)[func, a, p][1], L.model(comm)[func, a, p][0]) for a, p in combos]
    out += ["", "| size | " + " | ".join("%s/%s" % k for k in combos) + " | **chosen** | time (us) | busbw (GB/s) |",
            "|---:|" + "---:|" * len(combos) + "---|---:|---:|"]
    bus = 2.0 * (comm.nranks - 1) / comm.nranks if func == "allreduce" else (comm.nranks - 1) / comm.nranks
    for n in SIZES:
        best, table = choice(comm, func, n)
        out.append("| %s | %s | **%s/%s** | %.2f | %.2f |" % (
            fmt_size(n), " | ".join("%.2f" % table[k] for k in combos), *best, table[best], n / (table[best] * 1e3) * bus))
    return "\n".join(out + ["", "Crossovers: " + crossovers(comm, func), ""])


def crossovers(comm, func, lo=1, hi=16 << 30):
    """Exact byte sizes where the choice changes (scan x1.01, then bisect)."""
    res, n, prev = [], lo, choice(comm, func, lo)[0]
    while n < hi:
        m = max(n + 1, int(n * 1.01))
        if choice(comm, func, m)[0] != prev:
            a, b = n, m
            while b - a > 1:
                a, b = (a + b) // 2 if choice(comm, func, (a + b) // 2)[0] == prev else a, \
                    b if choice(comm, func, (a + b) // 2)[0] == prev else (a + b) // 2
            nxt = choice(comm, func, b)[0]
            res.append("%s/%s -> %s/%s at %d B (%.1f KiB)" % (*prev, *nxt, b, b / 1024.0))
            prev = nxt
        n = m
    return "; ".join(res) or "no change of choice between 1 B and 16 GiB"


def preset(name, nodes=None):
    return L.comm_of(load_topology(name, [f"scale_out.domains={nodes}"] if nodes else []))


def hand(cc, nodes, ring, tree, nvls, cpu, nvls_channels):
    graphs = {L.RING: L.Graph(*ring), L.TREE: L.Graph(*tree)} | ({L.NVLS: L.Graph(*nvls)} if nvls else {})
    return L.Comm(8 * nodes, nodes, cc, graphs, 16, nvls_channels, cpu)


if __name__ == "__main__":
    out = ["## DGX-H100, 1 node (8 GPUs)\n"]
    h1 = preset("dgx-h100")
    for f in ("allreduce", "allgather", "reducescatter"):
        out.append(section("DGX-H100 1 node %s" % f, h1, f))
    no_nvls = replace(h1, graphs={k: v for k, v in h1.graphs.items() if k != L.NVLS}, nvls_channels=0, model={})
    out.append(section("DGX-H100 1 node allreduce, NVLS disabled (NCCL_NVLS_ENABLE=0) - variant", no_nvls, "allreduce",
                       "Variant to expose the Ring LL/LL128/Simple crossovers that NVLS otherwise hides."))
    out.append("## DGX-H100, multi-node (h100-cluster: 8 GPUs/node, 8x400 Gb/s NICs)\n")
    for nn in (2, 4, 8, 16):
        out.append(section("DGX-H100 %d nodes allreduce" % nn, preset("h100-cluster", nn), "allreduce"))
    h4 = preset("h100-cluster", 4)
    balanced = replace(h4, graphs={**h4.graphs, L.TREE: replace(h4.graphs[L.TREE], pattern=L.PATTERN_BALANCED_TREE)},
                       model={})
    out.append(section("DGX-H100 4 nodes allreduce, tree pattern BALANCED_TREE instead of TREE - sensitivity", balanced,
                       "allreduce", "Sensitivity to the assumed tree-search pattern (removes the x0.85 of tuning.cc:309)."))
    out.append("## DGX-A100\n")
    a1 = preset("dgx-a100")
    for f in ("allreduce", "allgather", "reducescatter"):
        out.append(section("DGX-A100 1 node %s" % f, a1, f))
    for nn in (2, 4, 8, 16):
        a = hand(80, nn, (8, 24.0, 24.0, 0, L.PATH_NVL, L.PATH_PXB), (8, 24.0, 24.0, L.PATTERN_BALANCED_TREE, L.PATH_NVL,
                 L.PATH_PXB), None, "amd", 0)
        out.append(section("DGX-A100 %d nodes allreduce" % nn, a, "allreduce"))
    out.append("## DGX-B200 (bonus, same method)\n")
    out.append(section("DGX-B200 1 node allreduce", preset("dgx-b200"), "allreduce"))
    b4 = hand(100, 4, (8, 48.0, 48.0), (8, 48.0, 48.0, L.PATTERN_TREE), (8, 48.0, 48.0), "intel", 32)
    out.append(section("DGX-B200 4 nodes allreduce", b4, "allreduce"))
    print("\n".join(out))
