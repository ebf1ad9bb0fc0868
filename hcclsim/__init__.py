"""hccl-bench: collective-communication benchmarks on a simulator (DESIGN.md, docs/architecture.md).

The Python API (docs/api.md), imported on first use so `import hcclsim` stays light:

    hcclsim.sweep(...)          -> DataFrame of rows, as `hccl-bench sweep` (alias hcclsim.run_sweep)
    hcclsim.tune(...)           -> DataFrame of size ranges, as `hccl-bench tune` (alias hcclsim.run_tune)
    hcclsim.load_topology(...)  -> Topology (a preset or TOML file, with overrides)
    hcclsim.read_results(path)  -> DataFrame of a results file, metadata in attrs["provenance"]
    hcclsim.write_results(df, path)
"""

from .core import aliases as _aliases
from .core.version import __version__

_API = {"sweep": "run_sweep", "tune": "run_tune", "run_sweep": "run_sweep", "run_tune": "run_tune",
        "load_topology": "load_topology", "read_results": "read_results", "write_results": "write_results"}

_aliases.install()


def __getattr__(name: str):
    if name in _API:
        from . import api
        return getattr(api, _API[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_API])


__all__ = ["__version__", "load_topology", "read_results", "run_sweep", "run_tune", "sweep", "tune", "write_results"]
