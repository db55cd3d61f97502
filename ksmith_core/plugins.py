"""The plugin manager: loads every plugin from the ``kernelsmith`` entry-point group, built-ins included.

One broken plugin must never stop the program, so entry points are loaded one at a time and failures are
recorded (``ksmith plugins`` shows them) instead of raised; pluggy's own loader would abort on the first.

Environment:
  ``KSMITH_LOAD_PLUGINS``     comma-separated allow-list of plugin names; empty string loads none.
  ``KSMITH_DISABLE_PLUGINS``  comma-separated names never to load.
  ``KSMITH_PLUGIN_MODULES``   comma-separated ``module`` or ``module:attribute`` specs of unpackaged plugins
                              to register as well (a local plugin under development, a test's throwaway).
A name matches a plugin's entry-point name or its distribution name.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import threading
from dataclasses import dataclass, field, replace

import pluggy

from ksmith_core import hookspecs

log = logging.getLogger(__name__)


@dataclass
class PluginInfo:
    name: str
    distribution: str | None
    version: str | None
    module: str
    hooks: list[str] = field(default_factory=list)
    registered: dict[str, list[str]] = field(default_factory=dict)  # kind (plural) -> names
    error: str | None = None

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "module": self.module,
            "hooks": self.hooks,
            "registered": self.registered,
            "status": "ok" if self.error is None else "error",
            "error": self.error,
        }


_lock = threading.Lock()
_pm: pluggy.PluginManager | None = None
_infos: dict[str, PluginInfo] = {}


def _names_from_env(var: str) -> set[str] | None:
    raw = os.environ.get(var)
    if raw is None:
        return None
    return {part.strip() for part in raw.split(",") if part.strip()}


def _wanted(ep: importlib.metadata.EntryPoint, allow: set[str] | None, deny: set[str]) -> bool:
    names = {ep.name}
    if ep.dist is not None:
        names.add(ep.dist.name)
    if names & deny:
        return False
    return allow is None or bool(names & allow)


def _warn_unknown_names(var: str, names: set[str] | None, known: set[str]) -> None:
    unknown = sorted((names or set()) - known)
    if unknown:
        log.warning(
            "%s names %s, which no installed plugin is called (installed: %s)",
            var,
            ", ".join(unknown),
            ", ".join(sorted(known)) or "none",
        )


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    allow = _names_from_env("KSMITH_LOAD_PLUGINS")
    deny = _names_from_env("KSMITH_DISABLE_PLUGINS") or set()
    seen: set[str] = set()
    entry_points = list(importlib.metadata.entry_points(group=hookspecs.PROJECT))
    known = {ep.name for ep in entry_points} | {ep.dist.name for ep in entry_points if ep.dist is not None}
    _warn_unknown_names("KSMITH_LOAD_PLUGINS", allow, known)
    _warn_unknown_names("KSMITH_DISABLE_PLUGINS", deny, known)
    for ep in entry_points:
        if ep.name in seen:  # the same distribution visible twice on sys.path
            continue
        seen.add(ep.name)
        if not _wanted(ep, allow, deny):
            continue
        dist = ep.dist.name if ep.dist is not None else None
        version = ep.dist.version if ep.dist is not None else None
        info = PluginInfo(name=ep.name, distribution=dist, version=version, module=ep.value)
        try:
            module = ep.load()
            pm.register(module, name=ep.name)
        except Exception as exc:  # noqa: BLE001 - any failure of a plugin is reported, never fatal
            info.error = f"{type(exc).__name__}: {exc}".strip()
            log.warning("plugin %s failed to load: %s", ep.name, info.error)
        _infos[ep.name] = info


def _load_plugin_modules(pm: pluggy.PluginManager) -> None:
    for spec in sorted(_names_from_env("KSMITH_PLUGIN_MODULES") or ()):
        module_name, _, attribute = spec.partition(":")
        info = PluginInfo(name=spec, distribution=None, version=None, module=spec)
        try:
            plugin = importlib.import_module(module_name)
            if attribute:
                plugin = getattr(plugin, attribute)
            pm.register(plugin, name=spec)
        except Exception as exc:  # noqa: BLE001 - reported like a broken entry point
            info.error = f"{type(exc).__name__}: {exc}".strip()
            log.warning("plugin module %s failed to load: %s", spec, info.error)
        _infos[spec] = info


def _drop_plugins_with_unknown_hooks(pm: pluggy.PluginManager) -> None:
    """pluggy's check_pending() would raise for the whole program; here only the offending plugin goes."""
    for hook_name in dir(pm.hook):
        caller = getattr(pm.hook, hook_name)
        if hook_name.startswith("_") or not isinstance(caller, pluggy.HookCaller) or caller.spec is not None:
            continue
        for impl in caller.get_hookimpls():
            if impl.optionalhook or pm.get_plugin(impl.plugin_name) is None:
                continue
            pm.unregister(name=impl.plugin_name)
            info = _infos.get(impl.plugin_name)
            message = (
                f"implements unknown hook {hook_name!r} (a typo, or written for another ksmith version?)"
            )
            if info is not None:
                info.error = message
            log.warning("plugin %s dropped: %s", impl.plugin_name, message)


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, loading entry points on first use."""
    global _pm
    with _lock:
        if _pm is None:
            pm = pluggy.PluginManager(hookspecs.PROJECT)
            pm.add_hookspecs(hookspecs)
            _load_entry_points(pm)
            _load_plugin_modules(pm)
            _drop_plugins_with_unknown_hooks(pm)
            _pm = pm
        return _pm


def reset_plugin_manager() -> None:
    """Forget the loaded plugins (tests use this after changing the environment or installing one)."""
    global _pm
    with _lock:
        _pm = None
        _infos.clear()


def plugin_infos() -> list[PluginInfo]:
    """Every plugin the manager knows of (entry points and plugins registered in code): its hooks, what it
    registered by kind, and what went wrong loading or registering it."""
    from ksmith_core.registry import registry

    pm = get_plugin_manager()
    reg = registry()
    registered = reg.by_plugin()
    infos = {name: replace(info) for name, info in _infos.items()}
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        info = infos.get(name)
        if info is None:
            module = getattr(plugin, "__name__", type(plugin).__name__)
            info = infos[name] = PluginInfo(name=name, distribution=None, version=None, module=module)
        info.hooks = sorted(caller.name for caller in (pm.get_hookcallers(plugin) or []))
        info.registered = registered.get(name, {})
        if reg.errors.get(name):
            info.error = "; ".join(filter(None, [info.error, *reg.errors[name]]))
    return sorted(infos.values(), key=lambda i: i.name)
