"""The names a user types before anything is computed: collectives, output formats, the default preset,
the two tiers. They live here, with no import, so that `hccl-bench --help` and every command's `--help`
can print them without loading numpy, pandas or numba (the command modules import the rest when they run).
"""

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, BROADCAST, REDUCE = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce")
COLLECTIVES = (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, BROADCAST, REDUCE)
# Collectives whose per-pair sizes come from a traffic matrix (hcclsim.schedule.matrix). `-c all` means
# COLLECTIVES (nccl-tests' set); these are named on their own (docs/alltoallv.md).
ALL_TO_ALLV, SEND_RECV, PP_RING = "all_to_allv", "send_recv", "pp_ring"
MATRIX_COLLECTIVES = (ALL_TO_ALLV, SEND_RECV, PP_RING)
FORMATS = ("table", "csv", "json")          # what a command prints on stdout
DEFAULT_PRESET = "dgx-h100"
TIERS = ("scale_up", "scale_out")
