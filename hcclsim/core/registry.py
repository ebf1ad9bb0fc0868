"""A generic name -> object registry with a decorator; unknown names suggest the closest."""

from __future__ import annotations

from .errors import ConfigError, unknown


class Registry:
    def __init__(self, what: str):
        self.what = what
        self._items: dict[str, object] = {}

    def add(self, name: str, obj) -> None:
        if name in self._items:
            raise ConfigError(f"{self.what} {name!r} is registered twice")
        self._items[name] = obj

    def get(self, name: str, where: str = ""):
        if name not in self._items:
            err = unknown(self.what, name, self._items)
            raise ConfigError(f"{where}: {err}" if where else str(err))
        return self._items[name]

    def names(self) -> list[str]:
        return list(self._items)

    def items(self):
        return self._items.items()

    def sort(self, key) -> None:
        """Reorder by key(name, obj), stably: the order listings and 'all' follow."""
        self._items = dict(sorted(self._items.items(), key=lambda item: key(*item)))

    def __contains__(self, name) -> bool:
        return name in self._items
