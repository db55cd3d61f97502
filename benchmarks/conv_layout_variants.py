"""The suite's conv2d_bias_relu (fp16, 32 x 64 x 128 x 128, 3x3 to 128 channels) in several memory layouts,
timed beside torch.compile before any becomes an edit: where the shipped seed's time goes (0.43x of
torch.compile, docs/benchmarks.md §4c2), and what a convolution in channels-last order buys.

- ``conv_nchw`` / ``conv_cl``: ``F.conv2d`` alone, its input and weight contiguous (NCHW) or already in
  channels-last order (NHWC in memory);
- ``x_to_cl`` / ``y_to_nchw``: the layout changes alone (the input to channels-last, the output back);
- ``seed``: the shipped seed (cuDNN in NCHW, then its bias + ReLU kernel);
- ``seed_cl``: the seed with the convolution's input and weight made channels-last and its output made
  contiguous again before the seed's own kernel (what a layout edit of the wrapper writes);
- ``cl_epilogue``: the convolution in channels-last order and a bias + ReLU kernel that reads and writes
  that order (the output stays channels-last: the same values, other strides).

Each variant is checked against eager and timed with ``triton.testing.do_bench`` (median, L2 flushed) twice;
the table gives the lower median. The strides torch.compile's output has are printed too.

    python benchmarks/conv_layout_variants.py [--out OUT]

Exploration, not a ksmith result: numbers it prints go into docs only with this command named.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

PROBLEMS = Path(__file__).resolve().parents[1] / "plugins" / "ksmith_problems" / "problems" / "pooling"


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@triton.jit
def bias_relu_cl(y_ptr, bias_ptr, out_ptr, numel, channels, BLOCK: tl.constexpr):
    # channels-last memory: the channel is the fastest index, so element i's channel is i % channels.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    bias = tl.load(bias_ptr + offs % channels, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, tl.maximum(y + bias, 0.0).to(out_ptr.dtype.element_ty), mask=mask)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    problem = load(PROBLEMS / "conv2d_bias_relu.py", "conv_problem")
    seed = load(PROBLEMS / "conv2d_bias_relu.seed.py", "conv_seed")
    torch.manual_seed(0)
    model = problem.Model(*problem.get_init_inputs()).cuda()
    torch.manual_seed(0)
    new = seed.ModelNew(*problem.get_init_inputs()).cuda()
    new.load_state_dict(model.state_dict())
    (x,) = [t.cuda() for t in problem.get_inputs()]
    weight, conv_bias, bias = model.conv.weight, model.conv.bias, model.bias
    padding = model.conv.padding
    x_cl = x.contiguous(memory_format=torch.channels_last)
    w_cl = weight.contiguous(memory_format=torch.channels_last)
    compiled = torch.compile(model)
    with torch.no_grad():
        expected = model(x)
        got = compiled(x)
        strides = {
            "compile_out_contiguous": got.is_contiguous(),
            "compile_out_channels_last": got.is_contiguous(memory_format=torch.channels_last),
        }

        def seed_cl():
            y = F.conv2d(
                x.contiguous(memory_format=torch.channels_last),
                weight.contiguous(memory_format=torch.channels_last),
                conv_bias,
                padding=padding,
            ).contiguous()
            out = torch.empty_like(y)
            batch, channels, height, width = y.shape
            hw = height * width
            grid = (batch * channels, triton.cdiv(hw, 1024))
            seed._bias_relu_kernel[grid](y, bias, out, channels, hw, BLOCK_SIZE=1024, num_warps=4)
            return out

        def cl_epilogue(block=1024, warps=4):
            y = F.conv2d(
                x.contiguous(memory_format=torch.channels_last),
                weight.contiguous(memory_format=torch.channels_last),
                conv_bias,
                padding=padding,
            )
            out = torch.empty_like(y)
            bias_relu_cl[(triton.cdiv(y.numel(), block),)](
                y, bias, out, y.numel(), y.shape[1], BLOCK=block, num_warps=warps
            )
            return out

        y_cl = F.conv2d(x_cl, w_cl, conv_bias, padding=padding)
        variants = {
            "eager": (lambda: model(x), True),
            "torch.compile": (lambda: compiled(x), True),
            "seed": (lambda: new(x), True),
            "conv_nchw": (lambda: F.conv2d(x, weight, conv_bias, padding=padding), False),
            "conv_cl": (lambda: F.conv2d(x_cl, w_cl, conv_bias, padding=padding), False),
            "x_to_cl": (lambda: x.contiguous(memory_format=torch.channels_last), False),
            "y_to_nchw": (lambda: y_cl.contiguous(), False),
            "seed_cl": (seed_cl, True),
            "cl_epilogue": (cl_epilogue, True),
            "cl_epilogue_2048_8": (lambda: cl_epilogue(2048, 8), True),
            "conv_nchw_no_bias": (lambda: F.conv2d(x, weight, None, padding=padding), False),
            "conv_cl_no_bias": (lambda: F.conv2d(x_cl, w_cl, None, padding=padding), False),
        }
        rows = []
        for name, (fn, check) in variants.items():
            correct = None
            if check:
                correct = bool(torch.allclose(fn().float(), expected.float(), atol=2e-2, rtol=2e-2))
            ms = min(triton.testing.do_bench(fn, warmup=50, rep=300) for _ in range(2))
            rows.append({"variant": name, "ms": ms, "correct": correct})
        # cuDNN's own search of its algorithms instead of its heuristics, both layouts.
        torch.backends.cudnn.benchmark = True
        for name in ("conv_nchw", "conv_cl", "seed", "cl_epilogue"):
            fn, _ = variants[name]
            fn()
            ms = min(triton.testing.do_bench(fn, warmup=50, rep=300) for _ in range(2))
            rows.append({"variant": f"{name} (cudnn.benchmark)", "ms": ms, "correct": None})
        torch.backends.cudnn.benchmark = False
        # Which kernels torch.compile's forward runs, and for how long.
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                compiled(x)
            torch.cuda.synchronize()
        kernels = [
            (e.key, e.device_time_total / 10 / 1e3) for e in prof.key_averages() if e.device_time_total > 0
        ]
        strides["compile_kernels_ms"] = kernels
    base = next(r["ms"] for r in rows if r["variant"] == "torch.compile")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    for name, ms in strides.pop("compile_kernels_ms"):
        print(f"torch.compile kernel {ms:8.4f} ms  {name[:100]}")
    print(strides)
    print(f"{'variant':22s} {'ms':>8s} {'vs compile':>10s} correct")
    for r in rows:
        print(f"{r['variant']:22s} {r['ms']:8.4f} {base / r['ms']:9.3f}x {r['correct']}")
    if args.out:
        Path(args.out).write_text(
            json.dumps({"strides": strides, "compile_kernels_ms": kernels, "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
