"""The algorithm registry: duplicates refused, unknown names suggested, third parties via entry points."""

import sys
import types

import pytest

from hcclsim.core.errors import ConfigError
from hcclsim.core.registry import Registry
from hcclsim.schedule import algorithm as A
from hcclsim.schedule import collectives as C


def test_registering_a_name_twice_is_an_error():
    reg = Registry("algorithm")
    reg.add("x", object())
    with pytest.raises(ConfigError, match="registered twice"):
        reg.add("x", object())


def test_unknown_algorithm_suggests_the_closest():
    with pytest.raises(ConfigError, match=r"unknown algorithm 'rnig' \(did you mean 'ring'\?\)"):
        A.parse_spec("rnig")


def test_options_are_parsed_typed_and_checked():
    algo = A.parse_spec("ring:channels=2:chunks=4")
    assert (algo.options.channels, algo.options.chunks) == (2, 4)
    assert algo.label == "ring:channels=2:chunks=4"
    with pytest.raises(ConfigError, match="ring has no option 'chanels'"):
        A.parse_spec("ring:chanels=2")
    with pytest.raises(ConfigError, match="ring:channels expects a int"):
        A.parse_spec("ring:channels=two")
    with pytest.raises(ConfigError, match="must be >= 0"):
        A.parse_spec("ring:channels=-1")


def test_third_party_algorithms_register_through_entry_points(monkeypatch):
    module = types.ModuleType("thirdparty_algos")

    def body():
        @A.register
        class Mine(A.Algorithm):
            name = "thirdparty_ring"
            summary = "a plug-in"
            collectives = (C.ALL_REDUCE,)

    module.body = body
    sys.modules["thirdparty_algos"] = module

    class EP:
        value = "thirdparty_algos"

    imported = []
    real_import = A.importlib.import_module

    def fake_import(name):
        if name == "thirdparty_algos":
            imported.append(name)
            body()
            return module
        return real_import(name)

    monkeypatch.setattr(A, "entry_points", lambda group: [EP] if group == "hcclsim.algorithms" else [])
    monkeypatch.setattr(A.importlib, "import_module", fake_import)
    A.load_all()                                   # built-ins first, then undo what the plug-in adds
    monkeypatch.setattr(A.ALGORITHMS, "_items", dict(A.ALGORITHMS._items))
    monkeypatch.setattr(A, "_loaded", False)
    reg = A.load_all()
    assert imported == ["thirdparty_algos"]
    assert "thirdparty_ring" in reg.names() and "ring" in reg.names()


ORDER = ("from hcclsim.schedule.algorithm import load_all; "
         "print(' '.join(f'{cls.__module__}:{name}' for name, cls in load_all().items()))")


def test_the_order_of_algorithms_does_not_depend_on_who_imported_them_first():
    """'all' and listings follow the registry; a test or plug-in importing tree.py before load_all() once
    put tree first in every later sweep of that process (the Dask test's rows came out in another order)."""
    import subprocess

    def order(first: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", first + ORDER], capture_output=True, text=True, check=True)
        return done.stdout.split()

    fresh = order("")
    assert order("import hcclsim.algorithms.tree, hcclsim.algorithms.in_switch; ") == fresh
    modules = [entry.split(":")[0] for entry in fresh]
    assert modules == sorted(modules) and "hcclsim.algorithms.direct:direct" == fresh[0]
