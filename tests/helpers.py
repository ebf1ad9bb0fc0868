"""Shared test helpers: compile and time one algorithm on one topology."""

from __future__ import annotations

import numpy as np

from hcclsim.engine import analytic
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, parse_spec


def compile_for(spec: str, collective: str, topo, size: int = 1 << 20, dtype_size: int = 4, root: int = 0):
    algo = parse_spec(spec)
    problem = Problem(collective, topo, root)
    why = algo.unsupported(problem)
    assert why is None, why
    sz = C.sizing(collective, size, dtype_size, topo.nranks)
    return algo.compile(problem, algo.structure_key(problem, sz, dtype_size))


def same_schedule(a, b) -> bool:
    """Every array, field and note of two schedules equal: all the engines and the checker read."""
    import dataclasses
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if not (np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y):
            return False
    return True


def time_of(spec: str, collective: str, topo, size: int, dtype_size: int = 4, root: int = 0, **kw) -> float:
    s = compile_for(spec, collective, topo, size, dtype_size, root)
    sz = C.sizing(collective, size, dtype_size, topo.nranks)
    return float(analytic.run(s, topo, [sz.block_elems], dtype_size, **kw).time[0])


def busbw(spec: str, collective: str, topo, size: int, dtype_size: int = 4) -> float:
    """GB/s, nccl-tests definition."""
    t = time_of(spec, collective, topo, size, dtype_size)
    sz = C.sizing(collective, size, dtype_size, topo.nranks)
    return sz.size_bytes / t * C.busbw_factor(collective, topo.nranks) / 1e9


def run_cli(capsys, *argv):
    """main(argv) as the console script runs it: (exit status, stdout, stderr)."""
    from hcclsim.cli import main

    status = main([str(a) for a in argv])
    out = capsys.readouterr()
    return status, out.out, out.err


def assert_one_line_error(status, out, err, *needles, expected_status=2):
    """An error as users must see it: the status, nothing on stdout, one line on stderr, no traceback."""
    assert status == expected_status, err
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("hccl-bench: error: ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


ROW_KEY = ["collective", "algorithm", "engine", "size_bytes"]


def record_units(monkeypatch):
    """Every (collective, algorithm, engine, size) point a sweep computes from now on."""
    import hcclsim.sweeping.sweep as sweep_lib

    computed = []
    real = sweep_lib.run_unit

    def spy(ctx, unit):
        frames = real(ctx, unit)
        computed.extend(k for f in frames for k in zip(*(f[c] for c in ROW_KEY)))
        return frames
    monkeypatch.setattr(sweep_lib, "run_unit", spy)
    return computed


def counts_to_check(n: int):
    """Block sizes (elements) that divide evenly and that do not."""
    return sorted({1, 3, 7, n, 2 * n + 1, 64, 97})


__all__ = ["assert_one_line_error", "busbw", "compile_for", "counts_to_check", "np", "record_units", "run_cli",
           "time_of"]


def kernel_calls(monkeypatch) -> dict[str, int]:
    """Count the calls of each of the analytic engine's kernels (which path a point took)."""
    calls = {"symmetric": 0, "general": 0}
    for key, attr in (("symmetric", "symmetric_kernel"), ("general", "analytic_kernel")):
        real = getattr(analytic, attr)

        def wrapper(*args, _real=real, _key=key):
            calls[_key] += 1
            return _real(*args)
        monkeypatch.setattr(analytic, attr, wrapper)
    return calls
