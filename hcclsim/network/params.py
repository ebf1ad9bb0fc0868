"""Packet-level and endpoint parameters of a topology, with their defaults and the reasons for them.

PacketParams are read by the packet engine only. Endpoint (the [endpoint] table) is read by both
engines (issue overhead, reduction bandwidth), by hcclsim.engine.execution (launch, compiled-collective
costs, protocol) and by hcclsim.studies.workload (compute). A topology described only by the basic keys
keeps these defaults, under which nothing is charged beyond the network.
"""

from __future__ import annotations

from dataclasses import dataclass

SWITCHING = ("cut_through", "store_and_forward")
MERGE_ORDERS = ("aligned", "rotated", "shuffled")
TABLE_FULL = ("wait", "bypass")


@dataclass(frozen=True)
class PacketParams:
    """Keys of one tier (the [topology] table of a flat topology, or scale_up / scale_out)."""

    # 4 KiB: InfiniBand's largest MTU and the packet of the reference event loop in shared/reference;
    # NVLink moves smaller flits, but packet size mainly trades simulation cost against detail.
    mtu: int = 4096
    # Switches on NVLink and InfiniBand fabrics forward cut-through (a packet leaves once its header
    # is in); store_and_forward waits for the whole packet.
    switching: str = "cut_through"
    # Bytes of output-queue buffer per switch port. Assumption: 1 MiB, the order of a data-centre
    # switch's per-port share of its packet buffer; with lossless credits a full buffer stalls the
    # sender and never drops.
    switch_buffer: int = 1 << 20
    # Extra forwarding latency inside a switch, on top of the link latency per hop (0: the link
    # latency already stands for the whole hop).
    switch_latency: float = 0.0
    # Partial sums a reducing switch can hold at once (one per packet in flight). Assumption: 1024
    # entries (4 MiB of partial sums at 4 KiB packets), enough not to limit 50-450 GB/s links at
    # microsecond round trips; CAIS studies the sensitivity to this bound.
    reduction_table_entries: int = 1024
    # How far apart in time the first and the last GPU issue their request for the same address into
    # this tier's reducing switches (rank r of N issues its contributions r/(N-1) of it late; the
    # packet engine only). 0: coordinated thread blocks, as CAIS aligns them; neither the CAIS paper
    # nor NVIDIA gives an uncoordinated figure, so studies sweep it.
    merge_spread: float = 0.0
    # The order in which each GPU issues the packets of one contribution into a reducing switch
    # (MERGE_ORDERS; packet engine only): "aligned", the same order on every GPU (CAIS's coordinated
    # thread blocks); "rotated", GPU r of N starting r/N of the way in; "shuffled", a random order per
    # GPU and transfer, drawn from merge_seed. No figure from the paper or NVIDIA: studies vary it.
    merge_order: str = "aligned"
    merge_seed: int = 0
    # What a request that finds no entry for its address and the table full does (TABLE_FULL): "wait"
    # for one (which can deadlock when the GPUs' orders differ), or "bypass": go on unmerged, the
    # destinations reduce it (the model's fallback; docs/packet.md). "wait" keeps the aligned results.
    table_full: str = "wait"
    # Fraction of the link's peak bandwidth a collective library actually pushes over it (read by the
    # execution model, not the network): 1 for the ideal link; presets give NCCL's figure (docs/presets.md).
    efficiency: float = 1.0


EXECUTIONS = ("offload", "sm")
HIDEABLE = ("graph_generation", "metadata_copy", "subgraph_schedule", "issue_overhead", "wqe_rate")
# "express": the WQE write is the doorbell (one posted write, inside issue_overhead); "fetch": a doorbell,
# then the engine reads the WQE from memory (wqe_fetch_latency more per WQE). docs/execution.md.
DOORBELLS = ("express", "fetch")
WIRE_PROTOCOLS = ("ll", "ll128", "simple")
PROTOCOLS = ("none", *WIRE_PROTOCOLS, "auto")
# "fastest": the simulated fastest per size; "library": what NCCL's cost model picks (hcclsim.sweeping.library).
SELECTIONS = ("fastest", "library")


@dataclass(frozen=True)
class Protocol:
    """How an NCCL-like library moves data under one protocol (the [endpoint.ll], [endpoint.ll128] and
    [endpoint.simple] tables; docs/execution.md, "Protocols and channels").

    The defaults are NVIDIA NCCL's own cost model (v2.28.9, src/graph/tuning.cc), the parts that do not
    depend on the GPU generation; presets add their generation's caps. Per-protocol defaults: PROTOCOL_DEFAULTS.
    """

    share: float = 1.0                # fraction of a link's bandwidth that carries data
    step_latency: float = 0.0         # s per transfer beyond the path's latency (a step's flag/fence cost)
    net_step_latency: float = 0.0     # s more for a transfer that crosses the scale-out tier (network proxy)
    base_latency: float = 0.0         # s per collective: kernel start-up and the protocol's set-up
    bandwidth_cap: float = 0.0        # bytes/s a rank moves at most under this protocol (all channels); 0 = none
    channel_bandwidth: float = 0.0    # bytes/s one channel (one thread block) moves at most; 0 = no limit
    net_channel_bandwidth: float = 0.0  # bytes/s one ring channel moves across the network each way; 0 = no limit
    channel_bytes: int = 0            # a channel is dropped while the message is below channels x this; 0 = never


# LL: 16-byte lines of 8 data bytes and 8 flag bytes (NCCL src/device.h ncclLLFifoLine) -- half the
# bandwidth, the model's "busBw * .5" for Ring/LL (tuning.cc:304-312). LL128: 120 data bytes per 128-byte
# line (device.h NCCL_LL128_DATAELEMS); NCCL's model uses 0.92 (tuning.cc:306). Simple: all of it, behind
# memory fences. step_latency: NCCL's hwLat[NVLINK][Ring] = {LL .6, LL128 1.9, Simple 3.4} us per ring
# step (tuning.cc:151-154) less the 0.6 us of an LL step that a GPU-to-GPU path already costs in the
# presets (two 300 ns hops). base_latency: baseLat[Ring] = {6.6, 14, 8.4} us (tuning.cc:143-148).
# channel_bytes: NCCL drops a channel while nBytes < nChannels x nThreads x threshold (src/enqueue.cc
# topoGetAlgoInfo): threads {LL 512, LL128 640, Simple 512} x threshold {LL 8, LL128 8, Simple 64} bytes
# (src/include/comm.h NCCL_LL_THREAD_THRESHOLD...; tuning.cc maxThreads).
PROTOCOL_DEFAULTS = {
    "ll": Protocol(share=0.5, step_latency=0.0, base_latency=6.6e-6, channel_bytes=512 * 8),
    "ll128": Protocol(share=0.92, step_latency=1.3e-6, base_latency=14e-6, channel_bytes=640 * 8),
    "simple": Protocol(share=1.0, step_latency=2.8e-6, base_latency=8.4e-6, channel_bytes=512 * 64),
}
# net_step_latency: NCCL's hwLat[NET][Ring] = {LL 2.7, LL128 4.0, Simple 14} us per inter-node step
# (tuning.cc:163-166), less the 2.7 us an LL step already costs on the presets' scale-out path (two
# 1.35 us hops) and less step_latency (which every transfer pays): LL 0, LL128 0, Simple 14 - 2.7 - 2.8.
NET_STEP_DEFAULTS = {"ll": 0.0, "ll128": 0.0, "simple": 8.5e-6}
PROTOCOL_DEFAULTS = {name: Protocol(**{**p.__dict__, "net_step_latency": NET_STEP_DEFAULTS[name]})
                     for name, p in PROTOCOL_DEFAULTS.items()
}


@dataclass(frozen=True)
class Endpoint:
    """Keys of the [endpoint] table: how a rank launches, issues and executes collectives.

    Every default costs nothing, so a topology that says nothing about its endpoints is timed by the
    network alone; presets carry sourced values (docs/execution.md has the model, docs/presets.md the
    sources).
    """

    # -- issuing transfers (both engines) --
    message_engines: int = 0          # transfers a rank drives at once; 0 = no limit (packet engine)
    issue_overhead: float = 0.0       # s per transfer (work-queue element) from ready to its first byte leaving
    reduction_bandwidth: float = 0.0  # bytes/s a rank reduces on arrival (near-memory compute); 0 = free
    # -- a message engine's control core, doorbell and queue pairs (docs/execution.md, "Message engines").
    # HCCL's paper describes each mechanism and gives none of these numbers: every default costs nothing
    # and the HCCL studies sweep them. --
    engine_reduction_bandwidth: float = 0.0  # bytes/s one engine's near-memory units reduce; 0 = use the rank's
    wqe_rate: float = 0.0             # WQEs/s an engine's control core unrolls from its subgraph; 0 = no limit
    doorbell: str = "express"         # how an engine learns of a WQE (DOORBELLS)
    wqe_fetch_latency: float = 0.0    # s for an engine to read a WQE from memory (doorbell = "fetch")
    queue_pairs: int = 0              # QPs one engine holds (one peer each); 0 = one per peer
    qp_reuse: float = 0.0             # s of control-core time to re-target a QP to another peer (teardown + setup)
    # -- launching a collective --
    launch_overhead: float = 0.0      # s from the host's call to the collective starting (--launch host)
    graph_generation: float = 0.0     # s of host time to compile the collective's graph (HCCL)
    metadata_copy: float = 0.0        # s to copy the compiled graph's metadata to the device (HCCL)
    subgraph_schedule: float = 0.0    # s of control-core time per subgraph (one per channel a rank drives)
    hidden: tuple = ()                # which of HIDEABLE are pipelined behind the previous collective
    # -- where the collective runs --
    execution: str = "offload"        # "offload": dedicated message engines; "sm": on the compute units
    sm_share: float = 0.0             # fraction of compute units an "sm" collective occupies while it runs
    sm_reduction_bandwidth: float = 0.0  # bytes/s an "sm" collective reduces on arrival; 0 = free
    protocol: str = "none"            # none (the ideal link), ll, ll128, simple, or auto (the fastest per size)
    channels: int = 0                 # channels (thread blocks) a collective runs on; 0 = no per-channel limits
    ll: Protocol = PROTOCOL_DEFAULTS["ll"]
    ll128: Protocol = PROTOCOL_DEFAULTS["ll128"]
    simple: Protocol = PROTOCOL_DEFAULTS["simple"]
    algorithms: tuple = ()            # the algorithms the collective library implements (auto, tune); () = all
    selection: str = "fastest"        # how -a auto chooses: the fastest simulated, or the library's own model
    compute_capability: int = 0       # the GPU generation NCCL tunes for (90: Hopper); 0 = not an NVIDIA GPU
    in_switch_latency: float = 0.0    # s per collective that reduces or multicasts in a switch (NVLS)
    in_switch_efficiency: float = 1.0  # fraction of link bandwidth an in-switch reduction/multicast reaches
    in_switch_channels: int = 0       # channels an in-switch collective runs on (NVLS); 0 = its steps are not NCCL's
    in_switch_step_latency: float = 0.0  # s per step of an in-switch collective's channel (NVLS), with in_switch_latency
    # -- the device's compute, for overlap (hcclsim.studies.workload) --
    peak_flops: float = 0.0           # FLOP/s of the compute units (dense, the GEMM's dtype); 0 = unknown
    gemm_efficiency: float = 1.0      # fraction of peak_flops a large GEMM reaches alone
    memory_bandwidth: float = 0.0     # bytes/s of device memory (HBM); 0 = not a limit


DEFAULT_PACKET = PacketParams()
DEFAULT_ENDPOINT = Endpoint()
