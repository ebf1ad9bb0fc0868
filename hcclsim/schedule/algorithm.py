"""What an algorithm is: a compiler from (collective, topology, options) to a Schedule.

An algorithm module in ``algorithms/`` defines a subclass of :class:`Algorithm`
and decorates it with ``@register``. Options are a small frozen dataclass whose
fields carry their help text; users pass them as ``name:key=value:key=value``.
Third-party packages register theirs through the ``hcclsim.algorithms`` entry
point group (the entry point names a module to import).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass
from importlib.metadata import entry_points

from ..core.errors import ConfigError, UnsupportedError
from ..core.registry import Registry
from ..network.topology import Topology
from .collectives import Sizing
from .ir import Schedule

ALGORITHMS = Registry("algorithm")


@dataclass(frozen=True)
class NoOptions:
    pass


@dataclass(frozen=True)
class Problem:
    """Everything an algorithm may look at when it compiles."""

    collective: str
    topology: Topology
    root: int = 0

    @property
    def nranks(self) -> int:
        return self.topology.nranks


class Algorithm:
    name: str = ""
    summary: str = ""
    collectives: tuple[str, ...] = ()
    requires: str = "any topology"
    Options = NoOptions

    def __init__(self, options=None):
        self.options = options if options is not None else self.Options()

    @property
    def label(self) -> str:
        """The name with the options that differ from their defaults, as a user would type it."""
        default = self.Options()
        parts = [f"{f.name}={getattr(self.options, f.name)}" for f in dataclasses.fields(self.options)
                 if getattr(self.options, f.name) != getattr(default, f.name)]
        return ":".join([self.name, *parts])

    def unsupported(self, problem: Problem) -> str | None:
        """Why this algorithm cannot run the problem, or None when it can."""
        if problem.collective not in self.collectives:
            return f"does not implement {problem.collective} (it implements {', '.join(self.collectives)})"
        if problem.nranks < 2:
            return "a collective needs at least 2 ranks"
        return self.why_not(problem)

    def why_not(self, problem: Problem) -> str | None:
        return None

    def structure_key(self, problem: Problem, sizing: Sizing, dtype_size: int):
        """Sizes with equal keys share one compiled schedule (most algorithms: one for all sizes,
        key None)."""

    def compile(self, problem: Problem, key) -> Schedule:
        raise NotImplementedError


def register(cls):
    """Class decorator: add an Algorithm subclass to the registry under cls.name."""
    if not cls.name or not cls.collectives:
        raise TypeError(f"{cls.__name__} needs a name and collectives")
    ALGORITHMS.add(cls.name, cls)
    return cls


_loaded = False


def load_all() -> Registry:
    """Import the built-in algorithm modules and any registered through entry points (once)."""
    global _loaded
    if not _loaded:
        _loaded = True
        # The built-in modules are plug-ins like any other, found by package name: the registry sits
        # below the algorithms that register in it (docs/architecture.md).
        pkg = importlib.import_module("hcclsim.algorithms")

        modules = [f"{pkg.__name__}.{mod.name}" for mod in pkgutil.iter_modules(pkg.__path__)
                   if not mod.name.startswith("_")]
        modules += [ep.value.split(":")[0] for ep in entry_points(group="hcclsim.algorithms")]
        for module in modules:
            importlib.import_module(module)
        # Module order, then each module's own: whoever imported a module first (a test, a plug-in),
        # 'all', listings and results keep one order.
        rank = {module: i for i, module in enumerate(dict.fromkeys(modules))}
        ALGORITHMS.sort(lambda name, cls: rank.get(cls.__module__, len(rank)))
    return ALGORITHMS


def parse_spec(spec: str, where: str = "--algorithm") -> Algorithm:
    """'ring' or 'ring:channels=2:chunks=4' -> an Algorithm instance with its options."""
    load_all()
    name, *opts = spec.strip().split(":")
    cls = ALGORITHMS.get(name.strip(), where)
    fields = {f.name: f for f in dataclasses.fields(cls.Options)}
    values = {}
    for opt in opts:
        key, eq, raw = opt.partition("=")
        key = key.strip()
        if not eq or key not in fields:
            names = ", ".join(fields) or "none"
            raise ConfigError(f"{where}: {name} has no option {key!r} (options: {names}); "
                              f"write {name}:key=value")
        default = fields[key].default
        try:
            values[key] = type(default)(raw) if not isinstance(default, bool) else raw.lower() in ("1", "true", "yes")
        except ValueError:
            raise ConfigError(f"{where}: {name}:{key} expects a {type(default).__name__}, got {raw!r}") from None
    try:
        options = cls.Options(**values)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {name}: {e}") from None
    return cls(options)


def option_help(cls) -> list[tuple[str, object, str]]:
    """(name, default, help) of each option of an algorithm class."""
    return [(f.name, f.default, f.metadata.get("help", "")) for f in dataclasses.fields(cls.Options)]


def opt(default, help: str):
    """An option field with help text."""
    return dataclasses.field(default=default, metadata={"help": help})


def auto_chunks(size_bytes: int, chunk_size: int, max_chunks: int) -> int:
    """Pipeline chunks for a message: one per chunk_size bytes, between 1 and max_chunks."""
    return int(min(max(-(-size_bytes // chunk_size), 1), max_chunks))


def require(cond: bool, reason: str) -> None:
    if not cond:
        raise UnsupportedError(reason)
