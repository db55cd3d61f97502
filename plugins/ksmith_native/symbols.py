"""What a built extension calls outside itself: the undefined symbols of its ELF dynamic symbol table.

A candidate's kernels must do the computing. Torch ops its C++ code dispatches are seen at run time by the
guards' dispatch mode (``torch::matmul`` arrives as ``aten.mm``), but a library called directly is not: a
cuBLAS GEMM from the extension dispatches nothing. So the library's imports are read before it is loaded, and
an extension that imports a math library, torch's own kernels behind the dispatcher's back, runtime loading
or process and thread creation is refused (:func:`forbidden_imports`), unless the same toolchain puts that
import into an empty extension too (a statically linked runtime loads libraries itself: that is not the
candidate's doing). Read with a few lines of ELF parsing: no binutils needed, nothing of the library runs.
"""

from __future__ import annotations

import struct
from pathlib import Path

# (how an undefined symbol starts, what it is)
FORBIDDEN_PREFIXES: tuple[tuple[str, str], ...] = (
    ("cublas", "cuBLAS"),
    ("cudnn", "cuDNN"),
    ("cufft", "cuFFT"),
    ("cusparse", "cuSPARSE"),
    ("cusolver", "cuSOLVER"),
    ("cutensor", "cuTENSOR"),
    ("nccl", "NCCL"),
    ("mcblas", "mcBLAS (MetaX)"),
    ("mcdnn", "mcDNN (MetaX)"),
    ("_ZN2at4cuda4blas", "at::cuda::blas (torch's cuBLAS wrappers)"),
    ("_ZN2at6native", "at::native (torch's kernels, below the dispatcher)"),
    ("_ZN2at4cuda6cublas", "at::cuda::cublas"),
)
FORBIDDEN_NAMES: dict[str, str] = {
    "dlopen": "loading a library at run time",
    "dlmopen": "loading a library at run time",
    "dlsym": "looking up a symbol at run time",
    "dlvsym": "looking up a symbol at run time",
    "system": "starting a process",
    "popen": "starting a process",
    "fork": "starting a process",
    "vfork": "starting a process",
    "execv": "starting a process",
    "execve": "starting a process",
    "execvp": "starting a process",
    "execvpe": "starting a process",
    "execl": "starting a process",
    "execlp": "starting a process",
    "posix_spawn": "starting a process",
    "posix_spawnp": "starting a process",
    "pthread_create": "starting a thread",
}
# at::_ops::<op>::redispatch jumps past the dispatch keys already handled (the guards' dispatch mode too).
REDISPATCH = ("_ZN2at4_ops", "10redispatchE")


class NotAnElfLibrary(ValueError):
    pass


def undefined_symbols(path: str | Path) -> set[str]:
    """Names the shared library ``path`` imports (undefined entries of ``.dynsym``); ELF64 little-endian."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise NotAnElfLibrary(f"{path} is not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names: set[str] = set()
    for _name, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if sh_type != 11:  # SHT_DYNSYM
            continue
        strtab_offset = sections[link][4]
        for start in range(offset + (entsize or 24), offset + size, entsize or 24):  # entry 0 is null
            st_name, _st_info, _st_other, st_shndx = struct.unpack_from("<IBBH", data, start)
            if st_shndx != 0 or st_name == 0:
                continue
            end = data.index(b"\0", strtab_offset + st_name)
            names.add(data[strtab_offset + st_name : end].decode("utf-8", "replace"))
    return names


def forbidden_imports(symbols: set[str], baseline: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """What in ``symbols`` a candidate may not call, one line each: ``cublasSgemm_v2 (cuBLAS)``. Imports in
    ``baseline`` (what an empty extension built by the same toolchain imports) are the toolchain's own."""
    found = []
    for symbol in sorted(symbols - set(baseline)):
        why = FORBIDDEN_NAMES.get(symbol)
        if why is None:
            why = next((what for prefix, what in FORBIDDEN_PREFIXES if symbol.startswith(prefix)), None)
        if why is None and symbol.startswith(REDISPATCH[0]) and REDISPATCH[1] in symbol:
            why = "at::_ops redispatch (skips the dispatch keys already handled)"
        if why is not None:
            found.append(f"{symbol} ({why})")
    return found
