"""The schedule checker rejects wrong schedules, naming the rank and the chunk that come out wrong.

The checker is the oracle behind every "computes the collective" test, so here it is handed small
schedules (4 ranks, built by hand with ScheduleBuilder) that are correct and then broken one way
each: a missing step, a transfer to the wrong rank, a wrong chunk, a copy where a reduction was
due, and races -- transfers the dependencies leave unordered whose result depends on the order in
which they run. Most breakages leave rank 0 right and a later rank wrong, and the races give the
right result in the emitted order and a wrong one in the mirrored order.

What kills each mutation (each applied by hand to the code, the tests run, the change reverted):

* checker always passes (``return`` at the top of ``check``): every ``test_*_is_rejected`` test
  below and test_messages_name_the_block_of_a_chunk fail (no ScheduleError raised).
* checker looks at rank 0 only (``check_result`` compares rank 0's buffer only):
  test_missing_step_is_rejected, test_transfer_to_the_wrong_rank_is_rejected,
  test_wrong_chunk_is_rejected, test_missing_reduction_is_rejected,
  test_write_write_race_is_rejected, test_read_before_arrival_race_is_rejected (all wrong on
  rank 2 or 3 only), test_messages_name_the_block_of_a_chunk (rank 1).
* checker runs one execution order only (the emitted one: ``keys = [np.arange(n)]`` in
  ``_orders``): test_write_write_race_is_rejected, test_read_before_arrival_race_is_rejected
  (both are right in the emitted order).
* ring's chain Broadcast waits for 'left' (ORDER) instead of 'arrived' (DATA) on the previous
  hop: tests/test_ring.py::test_broadcast_chain_pays_one_alpha_per_hop_and_per_chunk (it takes
  (N-2) S/(P B) + P (a + S/(P B)) instead of (N-2+P)(a + S/(P B)); its zero-latency sibling
  test_broadcast_chain_pipelines cannot tell the two apart).
* the packet kernel's "a packet cannot finish before its tail arrives" rule deleted
  (``done = max(done, pk[po + P_TAIL])`` in packet_kernel._run): tests/test_packet.py::
  test_a_fast_link_after_a_slow_one_waits_for_the_tail, both cases (the fast hop would finish the
  last packet 4096 B x (1/B_slow - 1/B_fast) = 122.88 ns too early).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from hcclsim.core.errors import ScheduleError
from hcclsim.schedule import IN, OUT, PUT, PUT_REDUCE, Layout, ScheduleBuilder, const, order, rank_of, rot
from hcclsim.schedule import collectives as C
from hcclsim.schedule.checker import check

N = 4
COUNTS = (1, 5, 8)          # elements per block: one, and chunks of several elements


@dataclass(frozen=True)
class X:
    """One transfer of a hand-written schedule: src's chunk(s) into dst's chunk(s)."""

    src: int
    dst: int
    chunk: int
    dchunk: int | None = None
    n: int = 1
    kind: int = PUT
    sbuf: int = OUT
    dbuf: int = OUT
    name: object = None
    after: tuple = ()            # names of transfers (of earlier steps) it waits for


def explicit(collective: str, layout: Layout, steps: list[list[X]]):
    """A schedule of one-transfer templates; each step is one group."""
    b = ScheduleBuilder(collective, "hand", N, (1, N), layout)
    ids = {}
    for ops in steps:
        g = b.next_group()
        for x in ops:
            t = b.op(src=const(x.src), dst=const(x.dst), schunk=const(x.chunk),
                     dchunk=const(x.chunk if x.dchunk is None else x.dchunk), nchunks=x.n, group=g, kind=x.kind,
                     sbuf=x.sbuf, dbuf=x.dbuf, deps=[ids[a] for a in x.after])
            if x.name is not None:
                ids[x.name] = t
    return b.build()


# ----------------------------------------------------------------------------- correct schedules

def direct_all_gather(replace: dict | None = None, before: dict | None = None) -> list[list[X]]:
    """Every rank j PUTs its block j to every other rank, all at once. replace[(j, dst)]: the transfer
    that takes the place of j -> dst; before[(j, dst)]: a transfer emitted just before it."""
    replace, before = replace or {}, before or {}
    ops = []
    for j in range(N):
        for k in range(1, N):
            key = (j, (j + k) % N)
            ops += [before[key]] if key in before else []
            ops.append(replace.get(key, X(j, key[1], chunk=j)))
    return [ops]


def ring_all_gather(drop=(), unordered=()) -> list[list[X]]:
    """N-1 steps: in step s rank j sends block (j - s) mod N to j+1, once it has arrived from j-1.
    drop: (s, j) transfers left out; unordered: (s, j) transfers that do not wait for their block."""
    steps = []
    for s in range(N - 1):
        ops = []
        for j in range(N):
            if (s, j) in drop:
                continue
            after = ((s - 1, (j - 1) % N),) if s and (s, j) not in unordered else ()
            ops.append(X(j, (j + 1) % N, chunk=(j - s) % N, name=(s, j), after=after))
        steps.append(ops)
    return steps


def oneshot_all_reduce(split=None) -> list[list[X]]:
    """Every rank j reduces its whole input (2 chunks) into every other rank's output, all at once.
    split = (j, dst, kind of chunk 0): that transfer is sent as two, chunk 0 with the given kind
    (chunk 0: with one element per block chunk 1 is empty)."""
    ops = []
    for j in range(N):
        for k in range(1, N):
            d = (j + k) % N
            if split == (j, d, split[2] if split else None):
                ops.append(X(j, d, chunk=0, kind=split[2], sbuf=IN))
                ops.append(X(j, d, chunk=1, kind=PUT_REDUCE, sbuf=IN))
            else:
                ops.append(X(j, d, chunk=0, n=2, kind=PUT_REDUCE, sbuf=IN))
    return [ops]


def templated_ring_all_gather(n: int, skip_step: int | None = None, shift: int = 1):
    """The ring AllGather as algorithms/ring.py builds it: one template per step over all n ranks."""
    b = ScheduleBuilder(C.ALL_GATHER, "ring-by-hand", n, (1, n), Layout(n, 1))
    up = None
    for s in range(n - 1):
        if s == skip_step:
            continue
        deps = [(up, 0, 0, -1), order(up)] if up is not None else []
        up = b.op(src=rank_of(1, n), dst=rank_of(1, n, 0, shift), schunk=rot(1, -s, n), group=b.next_group(),
                  inst=(1, n), deps=deps)
    return b.build()


AG, AR = Layout(N, 1), Layout(1, 2)


@pytest.mark.parametrize("count", COUNTS)
def test_correct_schedules_pass(count):
    check(explicit(C.ALL_GATHER, AG, direct_all_gather()), count, orders=8)
    check(explicit(C.ALL_GATHER, AG, ring_all_gather()), count, orders=8)
    check(explicit(C.ALL_REDUCE, AR, oneshot_all_reduce()), count, orders=8)
    for n in (2, 3, 4, 7):
        check(templated_ring_all_gather(n), count, orders=8)


# ----------------------------------------------------------------------------- broken schedules

def rejected(schedule, count: int, rank: int, chunk: int, race: bool = False) -> str:
    """check() must raise, naming this rank and chunk; a race must say the order matters."""
    with pytest.raises(ScheduleError) as info:
        check(schedule, count)
    msg = str(info.value)
    assert re.search(rf"\brank {rank}, chunk {chunk}\b", msg), msg
    if race:
        assert "depends on the execution order" in msg and "emitted order computes the collective" in msg, msg
    else:
        assert "emitted order:" in msg and "depends on the execution order" not in msg, msg
    return msg


@pytest.mark.parametrize("count", COUNTS)
def test_missing_step_is_rejected(count):
    # the last step's 2 -> 3, which carries block (2 - 2) mod 4 = 0: rank 3 never gets chunk 0
    msg = rejected(explicit(C.ALL_GATHER, AG, ring_all_gather(drop={(N - 2, 2)})), count, rank=3, chunk=0)
    assert "garbage" in msg
    # a whole step's template left out: in the last step rank r receives block r - 1 - (N-2) = r + 1,
    # so every rank misses one block, rank 0 its chunk 1 first
    rejected(templated_ring_all_gather(N, skip_step=N - 2), count, rank=0, chunk=1)


@pytest.mark.parametrize("count", COUNTS)
def test_transfer_to_the_wrong_rank_is_rejected(count):
    # rank 1's block goes to rank 2 (which has it) instead of rank 3
    wrong = {(1, 3): X(1, 2, chunk=1)}
    rejected(explicit(C.ALL_GATHER, AG, direct_all_gather(replace=wrong)), count, rank=3, chunk=1)
    # the ring's step template sends to j+2 instead of j+1: in step s rank 0 receives from rank 2 the
    # block 2 - s, and rank 2 (which receives blocks 0, 3, 2 from rank 0) never has block 1 to send
    # in step 1, so rank 0's chunk 1 (and chunk 3, which nobody sends it) is garbage
    msg = rejected(templated_ring_all_gather(N, shift=2), count, rank=0, chunk=1)
    assert "garbage" in msg


@pytest.mark.parametrize("count", COUNTS)
def test_wrong_chunk_is_rejected(count):
    # rank 1's block lands in rank 3's chunk 2 instead of chunk 1: chunk 1 is never written
    wrong = {(1, 3): X(1, 3, chunk=1, dchunk=2)}
    msg = rejected(explicit(C.ALL_GATHER, AG, direct_all_gather(replace=wrong)), count, rank=3, chunk=1)
    assert "garbage" in msg


@pytest.mark.parametrize("count", COUNTS)
def test_missing_reduction_is_rejected(count):
    # 1 -> 3 copies chunk 0 instead of adding it: rank 3's chunk 0 loses either its own part and what
    # arrived before (copy last) or its own part (copy first) -- wrong in every order, values being >= 1
    rejected(explicit(C.ALL_REDUCE, AR, oneshot_all_reduce(split=(1, 3, PUT))), count, rank=3, chunk=0)
    check(explicit(C.ALL_REDUCE, AR, oneshot_all_reduce(split=(1, 3, PUT_REDUCE))), count)   # the split is fine


@pytest.mark.parametrize("count", COUNTS)
def test_write_write_race_is_rejected(count):
    # rank 2 writes its block 2 into rank 3's chunk 1 (as scratch), unordered with rank 1's write of
    # block 1 there. Emitted first, it is overwritten by the right value; the mirrored order runs the
    # two the other way round and leaves block 2 in rank 3's chunk 1.
    stale = {(1, 3): X(2, 3, chunk=2, dchunk=1)}
    sched = explicit(C.ALL_GATHER, AG, direct_all_gather(before=stale))
    msg = rejected(sched, count, rank=3, chunk=1, race=True)
    assert "mirrored order does not" in msg


@pytest.mark.parametrize("count", COUNTS)
def test_read_before_arrival_race_is_rejected(count):
    # step 1's 1 -> 2 forwards block 0 without waiting for step 0's 0 -> 1 to bring it. Emitted order:
    # step 0 runs first and the result is right; mirrored: the forward runs first (it is ready at once
    # and comes later in the schedule), so rank 2's chunk 0 gets rank 1's garbage
    sched = explicit(C.ALL_GATHER, AG, ring_all_gather(unordered={(1, 1)}))
    msg = rejected(sched, count, rank=2, chunk=0, race=True)
    assert "garbage" in msg


def test_messages_name_the_block_of_a_chunk():
    # AllGather on 3 ranks with 2 chunks per block: rank 1 never receives block 2's second chunk (chunk 5)
    b = ScheduleBuilder(C.ALL_GATHER, "hand", 3, (1, 3), Layout(3, 2))
    g = b.next_group()
    for j in range(3):
        for d in range(3):
            if d != j:
                b.op(src=const(j), dst=const(d), schunk=const(2 * j), nchunks=1 if (j, d) == (2, 1) else 2, group=g)
    with pytest.raises(ScheduleError, match=r"rank 1, chunk 5 \(block 2\), element 0 of the chunk"):
        check(b.build(), 4)
