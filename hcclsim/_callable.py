"""Callable modules: `hcclsim.sweep(...)` and `hcclsim.tune(...)` call the Python API (hcclsim.api) even
though hcclsim.sweep and hcclsim.tune are modules too.

Once a submodule is imported, Python binds the package attribute of that name to the module object,
so a function named `sweep` in hcclsim/__init__.py would be replaced by the module as soon as anyone ran
`from hcclsim.sweep import ...`. Instead the module itself is made callable: its class becomes a
ModuleType subclass whose __call__ forwards to an hcclsim.api function. Everything else about the
module (its attributes, `from hcclsim.sweep import sweep`) is unchanged.
"""

from __future__ import annotations

import sys
import types


def make_callable(module_name: str, api_function: str) -> None:
    """Make sys.modules[module_name](...) call hcclsim.api.<api_function>(...)."""

    class CallableModule(types.ModuleType):
        def __call__(self, *args, **kwargs):
            from . import api
            return getattr(api, api_function)(*args, **kwargs)

    CallableModule.__call__.__doc__ = f"hcclsim.api.{api_function} (see docs/api.md)"
    sys.modules[module_name].__class__ = CallableModule
