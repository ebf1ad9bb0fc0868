"""The schedule stage: what a collective must compute (collectives), the IR an algorithm compiles it to
(ir: templates of transfers with their dependencies), the algorithm registry (algorithm), the explicit
form of a schedule (expand), its translation symmetry (symmetry) and the checker that executes it.

The names an algorithm builds schedules with are re-exported here (``from hcclsim.schedule import
ScheduleBuilder, PUT, rot``), as plug-ins written against the flat layout imported them.
"""

from .ir import (
    DATA,
    DEP_ALL,
    DEP_COL,
    DEP_ROW,
    DEP_SHIFT,
    IN,
    KIND_NAMES,
    ORDER,
    OUT,
    PUT,
    PUT_REDUCE,
    STREAM,
    TMP,
    Affine,
    Layout,
    Schedule,
    ScheduleBuilder,
    const,
    order,
    rank_of,
    rot,
    stream,
    switch_of,
)

__all__ = ["DATA", "DEP_ALL", "DEP_COL", "DEP_ROW", "DEP_SHIFT", "IN", "KIND_NAMES", "ORDER", "OUT", "PUT",
           "PUT_REDUCE", "STREAM", "TMP", "Affine", "Layout", "Schedule", "ScheduleBuilder", "const", "order", "rank_of",
           "rot", "stream", "switch_of"]
