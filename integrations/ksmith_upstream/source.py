"""Where the upstream sources come from: a checkout, a wheel file, or a directory of unpacked wheel.

``--source`` takes any of the three. Without it, ``$KSMITH_UPSTREAM_WHEELS`` names a directory holding the
projects' wheels; without that, the pinned wheel is fetched with ``pip download --no-deps`` into
``~/.cache/ksmith/upstream``. Wheels are unpacked into that cache and read, never imported: only their
``.py`` text is used.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ksmith_core.errors import KsmithError


class UpstreamError(KsmithError):
    """An upstream source, symbol or run that ``import``/``patch`` cannot work with."""


@dataclass(frozen=True)
class Project:
    """What differs between the supported upstream projects."""

    name: str  # the command-line name and the import package
    pinned: str  # the version fetched when nothing else is given
    repo_prefix: str  # where the package sits in the upstream repository ("python/" for SGLang)


PROJECTS = {
    "sglang": Project("sglang", "0.5.23", "python/"),
    "lmdeploy": Project("lmdeploy", "0.18.0", ""),
}


@dataclass(frozen=True)
class UpstreamSource:
    """A tree in which ``root / project.name`` is the package's source directory."""

    project: Project
    version: str
    root: Path
    origin: str  # what the user gave (or what was fetched), for messages and provenance

    @property
    def package_dir(self) -> Path:
        return self.root / self.project.name

    def repo_path(self, file: Path) -> str:
        """The path of ``file`` (inside the package) in the upstream repository's layout."""
        return self.project.repo_prefix + file.relative_to(self.root).as_posix()


def project_named(name: str) -> Project:
    if name not in PROJECTS:
        raise UpstreamError(f"unknown upstream project {name!r}; choose one of: {', '.join(PROJECTS)}")
    return PROJECTS[name]


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ksmith" / "upstream"


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def resolve_source(project: Project, source: Path | None) -> UpstreamSource:
    """The upstream tree named by ``--source``, ``$KSMITH_UPSTREAM_WHEELS`` or the pinned wheel from PyPI."""
    if source is not None:
        return _from_path(project, Path(source))
    wheels = os.environ.get("KSMITH_UPSTREAM_WHEELS")
    if wheels:
        found = _wheel_in(project, Path(wheels))
        if found is None:
            raise UpstreamError(f"KSMITH_UPSTREAM_WHEELS={wheels} holds no {project.name} wheel")
        return _from_wheel(project, found)
    return _from_wheel(project, download_wheel(project))


def download_wheel(project: Project) -> Path:
    """The pinned wheel, fetched once into the cache with pip (no dependencies: only its sources are read)."""
    target = cache_root() / "wheels"
    found = _wheel_in(project, target, project.pinned)
    if found is not None:
        return found
    target.mkdir(parents=True, exist_ok=True)
    spec = f"{project.name}=={project.pinned}"
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", spec, "-d", str(target)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = _wheel_in(project, target, project.pinned)
    if proc.returncode != 0 or found is None:
        last = (proc.stderr.strip().splitlines() or ["no wheel found"])[-1]
        raise UpstreamError(
            f"could not download {spec} ({last}); give --source or set KSMITH_UPSTREAM_WHEELS"
        )
    return found


def _wheel_in(project: Project, directory: Path, version: str | None = None) -> Path | None:
    if not directory.is_dir():
        return None
    pattern = f"{project.name}-{version or '*'}-*.whl"
    wheels = sorted(directory.glob(pattern))
    return wheels[-1] if wheels else None


def _from_path(project: Project, path: Path) -> UpstreamSource:
    if not path.exists():
        raise UpstreamError(f"--source {path} does not exist")
    if path.is_file():
        if path.suffix != ".whl":
            raise UpstreamError(f"--source {path} is a file but not a wheel (.whl)")
        return _from_wheel(project, path)
    # A checkout has the package under its repository prefix; an unpacked wheel has it at the top.
    for root in (path / project.repo_prefix, path):
        if (root / project.name / "__init__.py").is_file():
            return UpstreamSource(project, _version_in(project, root), root.resolve(), str(path))
    raise UpstreamError(
        f"--source {path} holds no {project.name} package (expected {project.repo_prefix}{project.name}/__init__.py)"
    )


def _from_wheel(project: Project, wheel: Path) -> UpstreamSource:
    if not zipfile.is_zipfile(wheel):
        raise UpstreamError(f"{wheel} is not a readable wheel")
    digest = sha256_of(wheel)[:16]
    root = cache_root() / "unpacked" / f"{wheel.stem}-{digest}"
    done = root / ".complete"
    if not done.exists():
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.namelist() if m.endswith(".py") or m.endswith("METADATA")]
            archive.extractall(root, members)
        done.write_text(str(wheel), encoding="utf-8")
    if not (root / project.name / "__init__.py").is_file():
        raise UpstreamError(f"{wheel} holds no {project.name} package")
    return UpstreamSource(project, _version_in(project, root), root, wheel.name)


def _version_in(project: Project, root: Path) -> str:
    for metadata in sorted(root.glob(f"{project.name}-*.dist-info/METADATA")):
        match = re.search(r"^Version: (\S+)$", metadata.read_text(encoding="utf-8"), re.MULTILINE)
        if match:
            return match.group(1)
    version_file = root / project.name / "version.py"
    if version_file.is_file():
        match = re.search(r"""__version__\s*=\s*['"]([^'"]+)['"]""", version_file.read_text(encoding="utf-8"))
        if match:
            return match.group(1)
    return "unknown"
