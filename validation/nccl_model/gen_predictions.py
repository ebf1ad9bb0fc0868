#!/usr/bin/env python3
"""Generate predictions.md tables from nccl_model.py (stdlib only).  Usage: python3 gen_predictions.py > tables.md"""
import nccl_model as M

SIZES = [8, 64, 1 << 10, 8 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20,
         64 << 20, 256 << 20, 1 << 30, 4 << 30]


def fmt_size(n):
    return M._fmt_size(n)


def combos(comm, func):
    out = []
    coll = M.FUNCS.index(func)
    probe = comm.cost_table(func, 1 << 20)
    for a in range(len(M.ALGOS)):
        for p in range(len(M.PROTOS)):
            if probe[a][p] is not None and comm.bw[coll][a][p] > 0:
                out.append((a, p))
    return out


def tuning_table(comm, func):
    """Same information as NCCL's 'latency/bandwidth' INFO table (tuning.cc:499-539)."""
    coll = M.FUNCS.index(func)
    lines = ["| algo/proto | latency (us) | model bw (GB/s, algbw units) |", "|---|---:|---:|"]
    for a, p in combos(comm, func):
        lines.append("| %s/%s | %.2f | %.2f |" % (M.ALGOS[a], M.PROTOS[p], comm.lat[coll][a][p], comm.bw[coll][a][p]))
    return "\n".join(lines)


def size_table(comm, func, sizes=SIZES):
    cs = combos(comm, func)
    hdr = "| size | " + " | ".join("%s/%s" % (M.ALGOS[a], M.PROTOS[p]) for a, p in cs) + \
          " | **chosen** | time (us) | algbw (GB/s) | busbw (GB/s) | nc | nthreads |"
    sep = "|---:|" + "---:|" * len(cs) + "---|---:|---:|---:|---:|---:|"
    rows = [hdr, sep]
    for n in sizes:
        r = M.predict(comm, func, n)
        cells = []
        for a, p in cs:
            t = r["times"].get((M.ALGOS[a], M.PROTOS[p]))
            cells.append("%.2f" % t if t is not None else "-")
        rows.append("| %s | %s | **%s/%s** | %.2f | %.2f | %.2f | %d | %d |" % (
            fmt_size(n), " | ".join(cells), r["choice"][0], r["choice"][1], r["time_us"],
            r["algbw"], r["busbw"], r["nChannels"], r["nThreads"]))
    return "\n".join(rows)


def crossovers(comm, func, lo=1, hi=16 << 30):
    """Exact byte sizes where the chosen (algo,proto) changes (scan x1.01 then bisect)."""
    def choice(n):
        return M.predict(comm, func, n)["choice"]
    res = []
    n = lo
    prev = choice(n)
    while n < hi:
        m = max(n + 1, int(n * 1.01))
        c = choice(m)
        if c != prev:
            a, b = n, m
            while b - a > 1:
                mid = (a + b) // 2
                if choice(mid) == prev:
                    a = mid
                else:
                    b = mid
            res.append((b, prev, choice(b)))
            prev = choice(b)
            n = b
            continue
        n = m
    return res


def crossover_text(comm, func):
    xs = crossovers(comm, func)
    if not xs:
        return "no change of choice between 1 B and 16 GiB"
    return "; ".join("%s/%s -> %s/%s at %d B (%.1f KiB)" % (p[0], p[1], c[0], c[1], b, b / 1024.0) for b, p, c in xs)


def section(title, comm, func, note=""):
    s = ["### %s" % title, ""]
    if note:
        s += [note, ""]
    s += ["nRanks=%d nNodes=%d cc=%d comm.nChannels=%d nvlsChannels=%d | graphs (nCh x bwIntra/bwInter): Ring %s, Tree %s, NVLS %s" % (
        comm.nRanks, comm.nNodes, comm.minCompCap, comm.nChannels, comm.nvlsChannels,
        g(comm, M.RING), g(comm, M.TREE), g(comm, M.NVLS)), ""]
    s += [tuning_table(comm, func), ""]
    s += [size_table(comm, func), ""]
    s += ["Crossovers: " + crossover_text(comm, func), ""]
    return "\n".join(s)


def g(comm, a):
    gr = comm.graphs[a]
    if gr is None:
        return "none"
    return "%dx%g/%g" % (gr.nChannels, gr.bwIntra, gr.bwInter)


if __name__ == "__main__":
    out = []
    h1 = M.dgx_h100(1)
    out.append("## DGX-H100, 1 node (8 GPUs)\n")
    for f in ("allreduce", "allgather", "reducescatter"):
        out.append(section("DGX-H100 1 node %s" % f, h1, f))
    h1n = M.make_comm("dgx-h100", 1, nvlsChannels=0, nvlsSupport=False)
    out.append(section("DGX-H100 1 node allreduce, NVLS disabled (NCCL_NVLS_ENABLE=0) - variant", h1n, "allreduce",
                       "Variant to expose the Ring LL/LL128/Simple crossovers that NVLS otherwise hides."))
    out.append("## DGX-H100, multi-node (8 GPUs/node, 8x400 Gb/s NICs)\n")
    for nn in (2, 4, 8, 16):
        out.append(section("DGX-H100 %d nodes allreduce" % nn, M.dgx_h100(nn), "allreduce"))
    hb = M.dgx_h100(4)
    hb.graphs[M.TREE].pattern = M.PATTERN_BALANCED_TREE
    hb2 = M.Comm(hb.nRanks, hb.nNodes, 90, hb.graphs, nChannels=16, nvlsChannels=16, cpuVendor="intel")
    out.append(section("DGX-H100 4 nodes allreduce, tree pattern BALANCED_TREE instead of TREE - sensitivity", hb2, "allreduce",
                       "Sensitivity to the assumed tree-search pattern (removes the x0.85 of tuning.cc:309)."))
    out.append("## DGX-A100\n")
    a1 = M.dgx_a100(1)
    for f in ("allreduce", "allgather", "reducescatter"):
        out.append(section("DGX-A100 1 node %s" % f, a1, f))
    for nn in (2, 4, 8, 16):
        out.append(section("DGX-A100 %d nodes allreduce" % nn, M.dgx_a100(nn), "allreduce"))
    out.append("## DGX-B200 (bonus, same method)\n")
    out.append(section("DGX-B200 1 node allreduce", M.dgx_b200(1), "allreduce"))
    out.append(section("DGX-B200 4 nodes allreduce", M.dgx_b200(4), "allreduce"))
    print("\n".join(out))
