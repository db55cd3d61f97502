"""What every ``ksmith`` command shares, the plugins' own commands included.

A plugin adding a command (``ksmith_register_commands``) uses these so that its options, its JSON, its
numbers and its bad-input errors look like the core's.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import click

from ksmith_core.errors import ConfigError


def emit_json(data: Any) -> None:
    """Exactly one JSON document on stdout."""
    click.echo(json.dumps(data, indent=2, default=str))


def fmt_speedup(value: float | None) -> str:
    """A speedup with three significant digits (``1.25x``, ``0.900x``, ``0.000412x``), ``-`` if there is none."""
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:.0f}x"
    return f"{value:#.3g}".rstrip(".") + "x"


def console(stderr: bool = False):
    """A rich console that never wraps a line mid-phrase when its output is not a terminal."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, soft_wrap=True, width=200)


def eval_options(
    device: str | None,
    timeout: float | None,
    trials: int | None = None,
    timing_trials: int | None = None,
    small: bool | None = None,
):
    """:class:`~ksmith_core.model.EvalOptions` from the shared command-line options, checked."""
    from ksmith_core.environment import default_device
    from ksmith_core.model import EvalOptions

    device = device or default_device()
    if device == "cuda" and default_device() != "cuda":
        raise ConfigError("--device cuda was asked for, but torch sees no CUDA GPU here")
    kwargs: dict[str, Any] = {"device": device, "small": small}
    if timeout is not None:
        if timeout <= 0:
            raise ConfigError(f"--timeout must be positive (got {timeout})")
        kwargs["timeout_s"] = timeout
    if trials is not None:
        if trials < 1:
            raise ConfigError(f"--trials must be at least 1 (got {trials})")
        kwargs["correctness_trials"] = trials
    if timing_trials is not None:
        if timing_trials < 1:
            raise ConfigError(f"--timing-trials must be at least 1 (got {timing_trials})")
        kwargs["timing_trials"] = timing_trials
    return EvalOptions(**kwargs)


def backend_option(fn):
    """``--backend NAME``: judge with this backend whatever the problem's ``KSMITH_BACKEND`` says."""
    return click.option(
        "--backend",
        default=None,
        metavar="NAME",
        help="Backend that judges candidates (triton, cuda, ...), overriding the problem's KSMITH_BACKEND.",
    )(fn)


def device_options(fn):
    """``--device``, ``--timeout`` and ``--small/--full``."""
    fn = click.option(
        "--small/--full", "small", default=None, help="Problem size (default: small on CPU, full on GPU)."
    )(fn)
    fn = click.option(
        "--timeout", type=float, default=None, help="Seconds one candidate may take (default 180)."
    )(fn)
    fn = click.option(
        "--device",
        type=click.Choice(["cuda", "cpu"]),
        default=None,
        help="cuda, or cpu (Triton interpreter; timings marked interpreted). Default: cuda if present.",
    )(fn)
    return fn


# --------------------------------------------------------------------------------------------------------------
# Output paths: checked before any work, the same way by every command
# --------------------------------------------------------------------------------------------------------------


def output_file(path: Path, option: str = "-o") -> Path:
    """A file to write: its missing parent directories are created; a directory there is one clear error."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{option} {path} is a directory; give a file name")
    _make_parent(path.parent, option, path)
    if path.exists() and not _writable(path):
        raise ConfigError(f"{option} {path} cannot be written (permission denied)")
    return path


def output_dir(path: Path, option: str = "-o") -> Path:
    """A directory to write into, created if missing; an existing file there is one clear error."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {path} is a file; give a directory")
    _make_parent(path, option, path)
    if not _writable(path):
        raise ConfigError(f"{option} {path} cannot be written (permission denied)")
    return path


def _make_parent(directory: Path, option: str, asked: Path) -> None:
    for parent in (directory, *directory.parents):
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{option} {asked}: {parent} is a file, not a directory")
            break
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{option} {asked}: cannot create {directory}: {exc.strerror or exc}") from exc


def _writable(path: Path) -> bool:
    import os

    return os.access(path, os.W_OK)


# --------------------------------------------------------------------------------------------------------------
# Options that capabilities add to commands (the LLM proposer's --llm-* options, ...)
# --------------------------------------------------------------------------------------------------------------


def add_capability_options(command: click.Command, capabilities: Iterable[Any]) -> None:
    """Add each capability's ``cli_options`` to ``command`` once (two capabilities may share options)."""
    present = {param.name for param in command.params}
    for capability in capabilities:
        for option in getattr(capability, "cli_options", ()) or ():
            if option.name not in present:
                command.params.append(copy.copy(option))
                present.add(option.name)


def capability_options(capability: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    """What a capability makes of the values of its own command-line options (``{}`` if it has none)."""
    convert = getattr(capability, "options_from_cli", None)
    if convert is None:
        return {}
    own = {option.name for option in getattr(capability, "cli_options", ()) or ()}
    return dict(convert({k: v for k, v in values.items() if k in own}))
