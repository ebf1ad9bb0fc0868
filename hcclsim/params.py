"""Packet-level and endpoint parameters of a topology, with their defaults and the reasons for them.

The analytic engine ignores all of these; the packet engine reads them. A topology described
only by the basic keys keeps these defaults, under which the packet engine has no hidden
costs either: no issue overhead, no limit on message engines, no reduction cost.
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


@dataclass(frozen=True)
class Endpoint:
    """Keys of [topology.endpoint]: how ranks issue and absorb transfers."""

    message_engines: int = 0          # transfers a rank drives at once; 0 = no limit
    issue_overhead: float = 0.0       # seconds from a transfer being ready to its first packet leaving
    reduction_bandwidth: float = 0.0  # bytes/s a rank reduces on arrival (near-memory compute); 0 = free


DEFAULT_PACKET = PacketParams()
DEFAULT_ENDPOINT = Endpoint()
