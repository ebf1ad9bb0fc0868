"""hccl-bench: collective-communication benchmarks on a simulator (see DESIGN.md).

The Python API (docs/api.md), imported on first use so `import hcclsim` stays light:

    hcclsim.sweep(...)          -> DataFrame of rows, as `hccl-bench sweep` (alias hcclsim.run_sweep)
    hcclsim.tune(...)           -> DataFrame of size ranges, as `hccl-bench tune` (alias hcclsim.run_tune)
    hcclsim.load_topology(...)  -> Topology (a preset or TOML file, with overrides)
    hcclsim.read_results(path)  -> DataFrame of a results file, metadata in attrs["provenance"]
    hcclsim.write_results(df, path)

hcclsim.sweep and hcclsim.tune are also modules; they are callable (hcclsim._callable).
"""

__version__ = "0.1.0"

_API = {"run_sweep": "run_sweep", "run_tune": "run_tune", "load_topology": "load_topology",
        "read_results": "read_results", "write_results": "write_results"}
_CALLABLE_MODULES = ("sweep", "tune")


def __getattr__(name: str):
    if name in _API:
        from . import api
        return getattr(api, _API[name])
    if name in _CALLABLE_MODULES:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_API, *_CALLABLE_MODULES])
