"""The flat module paths of hccl-bench 0.1's first layout, kept importable for plug-ins.

Third-party algorithm modules (the ``hcclsim.algorithms`` entry-point group, docs/architecture.md) were
written against ``hcclsim.algorithm``, ``hcclsim.collectives``, ``hcclsim.errors``, ``hcclsim.units`` and
``hcclsim.topology``. Those names now live in stage folders; this finder makes each old name import
the module that replaced it (the same module object, so registries and isinstance checks agree).
``hcclsim.schedule`` needs no alias: the schedule package re-exports the IR.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

OLD_PATHS = {
    "hcclsim.algorithm": "hcclsim.schedule.algorithm",
    "hcclsim.collectives": "hcclsim.schedule.collectives",
    "hcclsim.errors": "hcclsim.core.errors",
    "hcclsim.units": "hcclsim.core.units",
    "hcclsim.topology": "hcclsim.network.topology",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in OLD_PATHS:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        module = importlib.import_module(OLD_PATHS[spec.name])
        spec.loader_state = module.__spec__   # the import system sets __spec__ next; exec_module puts it back
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state     # the module is already executed


def install() -> None:
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
