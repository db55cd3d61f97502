"""Write the wrapper Inductor generates on CUDA with its max-autotune Triton templates, one file per problem.

The CPU tests of template seeds (``tests/inductor/test_gemm_templates.py``) start from these files, since
Inductor has Triton GEMM templates on GPUs only. Run on a GPU machine::

    python benchmarks/capture_inductor_wrappers.py -o tests/data/inductor_templates \\
        plugins/ksmith_problems/problems/matmul/matmul.py plugins/ksmith_problems/problems/matmul/matmul_bias_relu.py

Each problem is traced and compiled exactly as ``ksmith seed --from inductor`` does on CUDA, at the problem's
small sizes unless ``--full``; ``OUT/NAME.wrapper.txt`` is the generated module that defines ``call``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path


def main() -> int:
    from ksmith_core.loading import load_problem
    from ksmith_inductor import seeding

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("-o", "--out", type=Path, required=True)
    parser.add_argument("--full", action="store_true", help="the problems' full sizes (default: small)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for path in args.problems:
        problem = load_problem(path)
        module = seeding._load_problem_module(problem, small=not args.full)
        traced = seeding._trace(module, problem, "cuda")
        wrapper = seeding._generate(traced, "cuda", inductor_templates=True).wrapper
        wrapper = re.sub(r"^# kernel path: .*\n", "", wrapper, flags=re.M)  # the machine's cache directory
        target = args.out / f"{path.stem}.wrapper.txt"
        target.write_text(wrapper)
        templates = wrapper.count("async_compile.triton('triton_tem_")
        print(f"{target}: {templates} template kernel(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
