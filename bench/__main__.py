"""Run the performance benchmarks: ``python -m bench`` (all, in order) or ``python -m bench scale startup``.

Benchmarks print figures; they assert nothing and are not part of the test suite (docs/performance.md).
"""

from __future__ import annotations

import datetime
import importlib
import os
import platform
import sys
import time

BENCHMARKS = ("scale", "startup", "throughput", "packet", "parallel")


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(f"usage: python -m bench [{' | '.join(BENCHMARKS)} ...]\n\n{__doc__.strip()}")
        return 0
    unknown = [a for a in argv if a not in BENCHMARKS]
    if unknown:
        print(f"bench: unknown benchmark {unknown[0]!r}; expected one of: {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    import hcclsim

    names = [b for b in BENCHMARKS if b in argv] if argv else list(BENCHMARKS)
    print(f"hccl-bench {hcclsim.__version__} benchmarks, {datetime.date.today().isoformat()}, "
          f"nproc {os.cpu_count()}, Python {platform.python_version()}, {platform.machine()}, "
          f"load average {os.getloadavg()[0]:.2f}")
    t0 = time.perf_counter()
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        t = time.perf_counter()
        module.main()
        print(f"   ({name}: {time.perf_counter() - t:.1f} s)", flush=True)
    print(f"\nall benchmarks: {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
