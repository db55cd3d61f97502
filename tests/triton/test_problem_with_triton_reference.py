"""A problem whose reference is itself a Triton kernel (an upstream kernel imported as the problem) loads where
Triton compiles for real, not only under the interpreter: @jit reads the kernel's source back through inspect."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

PROBLEM = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _double(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


    class Model(torch.nn.Module):
        def forward(self, x):
            return x
    """
)

CHECK = """
import sys
from ksmith_triton.child_common import load_problem_module

module = load_problem_module(sys.stdin.read(), None)
print(type(module._double).__name__)
print("_double" in module._double.src)
"""


def test_a_problem_module_with_a_jit_kernel_loads_without_the_interpreter():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # as on a GPU: real JITFunctions
    done = subprocess.run(
        [sys.executable, "-c", CHECK], input=PROBLEM, capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["JITFunction", "True"]
