"""``python -m ksmith_native.build_child``: build one extension with torch's own builder, and load nothing.

The job arrives as one JSON object on stdin: ``{"arguments": <load_inline keyword arguments>,
"build_directory": DIR}``. torch.utils.cpp_extension.load_inline writes the sources, the ninja file and
builds exactly as it would for KernelBench; only its last step, importing the built library, is replaced,
so none of the candidate's code (static initialisers included) runs here. The library is ``DIR/NAME.so``.
Exit 0 when built; 1 with the builder's message (the compiler's output) on stderr when not.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    job = json.loads(sys.stdin.read())
    import torch.utils.cpp_extension as cpp_extension

    def built_path(module_name: str, path: str, is_python_module: bool) -> str:
        return os.path.join(path, f"{module_name}.so")

    cpp_extension._import_module_from_library = built_path  # the builder's final import, replaced
    arguments = dict(job["arguments"])
    if not arguments.get("no_implicit_headers"):
        arguments.pop("no_implicit_headers", None)  # newer torch only; left out where it is the default
    try:
        cpp_extension.load_inline(
            **arguments, build_directory=job["build_directory"], verbose=False, keep_intermediates=True
        )
    except Exception as exc:  # noqa: BLE001 - the builder's message carries the compiler's output
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
