"""The one registry of named capabilities, filled through the registration hooks of every loaded plugin.

The core asks it for a capability by kind and name (``lookup(Proposer, "mutate")``) and calls what it gets.
Each plugin's registration hook is called on its own, so the registry knows who registered what
(``ksmith plugins`` lists it) and one plugin whose registration fails is reported, never fatal. Two plugins
registering one name of one kind is a conflict: using that name fails with one line naming both, and the user
picks with ``KSMITH_DISABLE_PLUGINS``.

The registry is rebuilt whenever the set of registered plugins changes (tests register throwaway plugins), so
plugins register module-level objects and keep any state there, not in a fresh object per registration.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, TypeVar

from ksmith_core.capabilities import KIND_OF, KINDS, Kind
from ksmith_core.errors import PluginError
from ksmith_core.plugins import get_plugin_manager

T = TypeVar("T")


@dataclass(frozen=True)
class Registration:
    kind: Kind
    name: str
    plugin: str
    impl: Any


class Registry:
    """What the loaded plugins registered, by kind and name, in registration order."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str], list[Registration]] = defaultdict(list)
        self.errors: dict[str, list[str]] = defaultdict(list)  # plugin -> what went wrong registering

    def add(self, registration: Registration) -> None:
        self._by_key[(registration.kind.name, registration.name)].append(registration)

    def names(self, cls: type) -> list[str]:
        kind = KIND_OF[cls].name
        return sorted(name for (k, name) in self._by_key if k == kind)

    def all(self, cls: type[T]) -> list[T]:
        """Every unambiguous capability of a kind, in registration order."""
        kind = KIND_OF[cls].name
        return [regs[0].impl for (k, _), regs in self._by_key.items() if k == kind and len(regs) == 1]

    def lookup(self, cls: type[T], name: str) -> T:
        """The capability ``name`` of this kind; one clear line when it is unknown or ambiguous."""
        kind = KIND_OF[cls]
        regs = self._by_key.get((kind.name, name))
        if not regs:
            listed = ", ".join(self.names(cls)) or "none installed"
            raise PluginError(f"unknown {kind.name} {name!r} (registered: {listed})")
        if len(regs) > 1:
            plugins = " and ".join(repr(r.plugin) for r in regs)
            raise PluginError(
                f"{kind.name} {name!r} is registered by two plugins, {plugins}: disable one with "
                f"KSMITH_DISABLE_PLUGINS={regs[-1].plugin}"
            )
        return regs[0].impl

    def default(self, cls: type[T]) -> T | None:
        """The one capability of a kind registered with ``default=True`` (else the only one, if just one)."""
        candidates = self.all(cls)
        marked = [c for c in candidates if getattr(c, "default", False)]
        if len(marked) > 1:
            kind = KIND_OF[cls]
            names = ", ".join(repr(c.name) for c in marked)
            raise PluginError(f"several {kind.plural.replace('_', ' ')} claim to be the default ({names})")
        if marked:
            return marked[0]
        return candidates[0] if len(candidates) == 1 else None

    def by_plugin(self) -> dict[str, dict[str, list[str]]]:
        """``{plugin: {kind plural: [names]}}`` for ``ksmith plugins``."""
        out: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        for regs in self._by_key.values():
            for reg in regs:
                out[reg.plugin][reg.kind.plural].append(reg.name)
        return {plugin: {k: sorted(v) for k, v in kinds.items()} for plugin, kinds in out.items()}

    def conflicts(self) -> list[str]:
        return [
            f"{kind} {name!r}: " + ", ".join(r.plugin for r in regs)
            for (kind, name), regs in sorted(self._by_key.items())
            if len(regs) > 1
        ]


def _registrar(registry: Registry, kind: Kind, plugin: str, errors: list[str]):
    def register(impl: Any, *extra: Any) -> None:
        if isinstance(impl, str) or extra:
            errors.append(
                f"registered {impl!r} by name: register a {kind.cls.__name__}(...) object carrying its "
                "implementation instead"
            )
            return
        if not isinstance(impl, kind.cls):
            errors.append(f"registered {impl!r} as a {kind.name}; expected a {kind.cls.__name__}")
            return
        name = getattr(impl, "name", None)
        if not isinstance(name, str) or not name.strip():
            errors.append(f"registered a {kind.name} without a name")
            return
        if kind.method and not callable(getattr(impl, kind.method, None)):
            errors.append(f"registered {kind.name} {name!r} whose {kind.method!r} is not callable")
            return
        registry.add(Registration(kind, name, plugin, impl))

    return register


def _build() -> Registry:
    pm = get_plugin_manager()
    registry = Registry()
    for kind in KINDS:
        caller = getattr(pm.hook, kind.hook)
        for impl in caller.get_hookimpls():  # in registration order (pluggy *calls* them last-first)
            errors: list[str] = []
            try:
                impl.function(register=_registrar(registry, kind, impl.plugin_name, errors))
            except Exception as exc:  # noqa: BLE001 - a plugin's failure is reported, never fatal
                errors.append(f"{kind.hook} raised {type(exc).__name__}: {exc}")
            registry.errors[impl.plugin_name].extend(errors)
    return registry


_lock = threading.Lock()
_cache: tuple[tuple, Registry] | None = None


def registry() -> Registry:
    """The registry for the plugins loaded now (rebuilt when plugins are registered or removed)."""
    global _cache
    pm = get_plugin_manager()
    key = tuple((name, id(plugin)) for name, plugin in pm.list_name_plugin())
    with _lock:
        if _cache is None or _cache[0] != key:
            _cache = (key, _build())
        return _cache[1]


def lookup(cls: type[T], name: str) -> T:
    """Shorthand for ``registry().lookup(cls, name)``."""
    return registry().lookup(cls, name)
