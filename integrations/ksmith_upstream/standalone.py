"""Run a patch's generated upstream test and benchmark without the upstream package installed.

Neither SGLang nor LMDeploy imports without its CUDA-only dependencies, and the GPU machine has neither. The
patched kernel module itself needs only torch and triton, so it is loaded alone from its file under its real
module name (its parent packages are empty stand-ins), along with stand-ins for SGLang's test helpers
(``register_cuda_ci``, ``CustomTestCase``). The generated files then import it as they would upstream.

``ksmith patch`` writes ``patch.json`` and the patched files under ``tree/``; :func:`check_patch` takes that
directory. From a shell: ``python -m ksmith_upstream.standalone OUT_DIR [--device cuda] [--cases N]``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

STAND_INS = '''
"""Stands in for the upstream package: only the patched kernel module is loaded, from its file."""
import importlib.util
import sys
import types
import unittest

PATCHED = {patched!r}
MODULE = {module!r}


def _package(name):
    if name not in sys.modules:
        mod = types.ModuleType(name)
        mod.__path__ = []
        sys.modules[name] = mod
        parent, _, leaf = name.rpartition(".")
        if parent:
            setattr(_package(parent), leaf, mod)
    return sys.modules[name]


spec = importlib.util.spec_from_file_location(MODULE, PATCHED)
kernel_module = importlib.util.module_from_spec(spec)
parent, _, leaf = MODULE.rpartition(".")
setattr(_package(parent), leaf, kernel_module)
sys.modules[MODULE] = kernel_module
spec.loader.exec_module(kernel_module)
ci = types.ModuleType("sglang.test.ci.ci_register")
ci.register_cuda_ci = lambda **kwargs: None
sys.modules[ci.__name__] = ci
utils = types.ModuleType("sglang.test.test_utils")
utils.CustomTestCase = unittest.TestCase
sys.modules[utils.__name__] = utils
'''


def _rewritten(source: str, device: str, cases: int | None) -> str:
    """The generated file on ``device``, its sweep cut to the first ``cases`` cases."""
    lines = source.replace('"cuda"', f'"{device}"').replace("'cuda'", f"'{device}'").splitlines()
    if cases is not None:
        end = next(
            n.end_lineno
            for n in ast.parse(source).body
            if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "CASES" for t in n.targets)
        )
        lines.insert(end, f"CASES = CASES[:{cases}]")
    return "\n".join(lines) + "\n"


def _env(device: str) -> dict[str, str]:
    env = dict(os.environ)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    return env


def run_test(
    test_file: Path, patched: Path, module: str, workdir: Path, device: str = "cuda", cases: int | None = None
) -> subprocess.CompletedProcess:
    """The generated test under pytest, against the patched module alone."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / test_file.name).write_text(_rewritten(test_file.read_text("utf-8"), device, cases), "utf-8")
    (workdir / "conftest.py").write_text(STAND_INS.format(patched=str(patched), module=module), "utf-8")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(workdir),
        str(workdir),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(device), cwd=workdir, timeout=3600)


def run_bench(
    bench_file: Path, patched: Path, module: str, workdir: Path, cases: int | None = None
) -> subprocess.CompletedProcess:
    """The generated micro-benchmark (GPU only: it times each call's GPU time in a CUDA graph, and the call
    with its launch with ``triton.testing.do_bench``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / "run_bench.py"
    (workdir / "stand_ins.py").write_text(STAND_INS.format(patched=str(patched), module=module), "utf-8")
    (workdir / bench_file.name).write_text(_rewritten(bench_file.read_text("utf-8"), "cuda", cases), "utf-8")
    script.write_text(
        "import runpy, sys\nsys.path.insert(0, sys.argv[1])\nimport stand_ins  # noqa: F401\n"
        "runpy.run_path(sys.argv[2], run_name='__main__')\n",
        "utf-8",
    )
    cmd = [sys.executable, str(script), str(workdir), str(workdir / bench_file.name)]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env("cuda"), timeout=3600)


SLOWER_THAN = (
    0.97  # a shape where the evolved path runs below this fraction of upstream's speed is a regression
)


def bench_cases(output: str) -> list[dict]:
    """The generated benchmark's table of GPU times: rows ``case  original (us)  evolved (us)  speedup``
    (the rows of its second table, with the launch, end in ``launch`` and are not these)."""
    rows = []
    for line in output.splitlines():
        fields = line.rsplit(None, 3)
        if len(fields) != 4 or not fields[3].endswith("x"):
            continue
        try:
            original, evolved, speedup = float(fields[1]), float(fields[2]), float(fields[3][:-1])
        except ValueError:
            continue  # the header
        rows.append(
            {"case": fields[0].strip(), "original_us": original, "evolved_us": evolved, "speedup": speedup}
        )
    return rows


UPSTREAM_PATH = "[upstream path]"  # the benchmark's mark of a shape where the patch runs upstream's code


def regressions(cases: list[dict]) -> list[dict]:
    """Shapes where the patch would make upstream slower: it should not be sent as it is. A shape the patch
    leaves on upstream's path times the same code twice, so a difference there is noise, not the patch."""
    return [case for case in cases if case["speedup"] < SLOWER_THAN and UPSTREAM_PATH not in case["case"]]


def check_patch(out: Path, device: str = "cuda", cases: int | None = None) -> dict:
    """Run the test (and, on a GPU, the benchmark) of the patch ``ksmith patch`` wrote into ``out``."""
    manifest = json.loads((out / "patch.json").read_text("utf-8"))
    tree = out / "tree"
    patched = tree / manifest["kernel_file"]
    result: dict = {"manifest": manifest, "device": device}
    test = run_test(
        tree / manifest["test_file"], patched, manifest["module"], out / "check" / "test", device, cases
    )
    result["test"] = {"returncode": test.returncode, "output": test.stdout[-4000:] + test.stderr[-2000:]}
    if device != "cpu":
        bench = run_bench(
            tree / manifest["bench_file"], patched, manifest["module"], out / "check" / "bench", cases
        )
        result["bench"] = {"returncode": bench.returncode, "output": bench.stdout + bench.stderr[-2000:]}
        result["bench"]["cases"] = bench_cases(bench.stdout)
        result["bench"]["regressions"] = regressions(result["bench"]["cases"])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the directory `ksmith patch -o` wrote")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--cases", type=int, default=None, help="only the first N sweep cases")
    args = parser.parse_args(argv)
    result = check_patch(args.out, args.device, args.cases)
    (args.out / "check.json").write_text(json.dumps(result, indent=2), "utf-8")
    print(result["test"]["output"])
    if "bench" in result:
        print(result["bench"]["output"])
    slower = result.get("bench", {}).get("regressions", [])
    if slower:
        shapes = "; ".join(f"{c['case']}: {c['speedup']:.2f}x" for c in slower)
        print(f"ksmith: the evolved path is slower than upstream on {len(slower)} shape(s): {shapes}")
    failed = result["test"]["returncode"] != 0 or result.get("bench", {}).get("returncode", 0) != 0 or slower
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
