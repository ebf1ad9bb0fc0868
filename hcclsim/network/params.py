"""Packet-level and endpoint parameters of a topology, with their defaults and the reasons for them.

PacketParams are read by the packet engine only. Endpoint (the [endpoint] table) is read by both
engines (issue overhead, reduction bandwidth), by hcclsim.engine.execution (launch, compiled-collective
costs, protocol) and by hcclsim.studies.workload (compute). A topology described only by the basic keys
keeps these defaults, under which nothing is charged beyond the network.
"""

from __future__ import annotations

from dataclasses import dataclass

SWITCHING = ("cut_through", "store_and_forward")


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


EXECUTIONS = ("offload", "sm")
HIDEABLE = ("graph_generation", "metadata_copy", "subgraph_schedule", "issue_overhead")
PROTOCOLS = ("none", "ll", "ll128", "simple")


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
    protocol: str = "none"            # NCCL-like protocol: none (ideal), ll, ll128, simple (hcclsim.engine.execution)
    # -- the device's compute, for overlap (hcclsim.studies.workload) --
    peak_flops: float = 0.0           # FLOP/s of the compute units (dense, the GEMM's dtype); 0 = unknown
    gemm_efficiency: float = 1.0      # fraction of peak_flops a large GEMM reaches alone
    memory_bandwidth: float = 0.0     # bytes/s of device memory (HBM); 0 = not a limit


DEFAULT_PACKET = PacketParams()
DEFAULT_ENDPOINT = Endpoint()
