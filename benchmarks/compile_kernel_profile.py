"""Where torch.compile's time goes on some KernelBench problems: eager and compiled time per call, and the
CUDA time of each kernel Inductor generated (torch.profiler), with Inductor's output code copied to
/tmp/kbcode/. docs/benchmarks.md section 6f reads it.

    python benchmarks/compile_kernel_profile.py KERNELBENCH/level1/38_L1Norm_.py ...
"""

import glob
import importlib.util
import os
import shutil
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

os.makedirs("/tmp/kbcode", exist_ok=True)
names = sys.argv[1:]
for path in names:
    name = os.path.basename(path)[:-3]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
    torch._dynamo.reset()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"/tmp/ind_{name}"
    cm = torch.compile(model)
    with torch.no_grad():
        for _ in range(3):
            cm(*inputs)
        torch.cuda.synchronize()
        for fn, label in ((model, "eager"), (cm, "compile")):
            t = time.perf_counter()
            for _ in range(10):
                fn(*inputs)
            torch.cuda.synchronize()
            print(f"{name} {label}: {(time.perf_counter() - t) / 10 * 1e3:.3f} ms/call", flush=True)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                cm(*inputs)
            torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8), flush=True)
    nbytes = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
    print(f"{name}: input bytes {nbytes / 1e6:.1f} MB", flush=True)
    for f in glob.glob(f"/tmp/ind_{name}/**/*.py", recursive=True):
        txt = open(f).read()
        if "@triton.jit" in txt and "def call(" in txt:
            shutil.copy(f, f"/tmp/kbcode/{name}.py")
    del model, inputs, cm
    torch.cuda.empty_cache()
