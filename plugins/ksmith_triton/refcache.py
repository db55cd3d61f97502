"""The reference timing cache: eager / torch.compile medians and GPU ceilings, measured once and kept; and
each problem's measured memory footprint, from which the memory admission starts (``admission.py``).

diskcache with ``JSONDisk`` (values are JSON, never pickle) in a 0700 directory, keyed by everything that
changes the number: problem hash, device name, torch / triton versions, protocol version, size and trials.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ksmith_triton import PROTOCOL_VERSION


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ksmith" / "reference"


class ReferenceCache:
    def __init__(self, directory: str | Path | None = None) -> None:
        import diskcache

        self.directory = Path(directory) if directory else default_cache_dir()
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.directory, 0o700)
        self._cache = diskcache.Cache(str(self.directory), disk=diskcache.JSONDisk)

    @staticmethod
    def key(kind: str, **parts: Any) -> str:
        return json.dumps({"kind": kind, "protocol": PROTOCOL_VERSION, **parts}, sort_keys=True)

    def get(self, key: str) -> Any:
        return self._cache.get(key)

    def set(self, key: str, value: Any) -> None:
        self._cache.set(key, value)

    def close(self) -> None:
        self._cache.close()
