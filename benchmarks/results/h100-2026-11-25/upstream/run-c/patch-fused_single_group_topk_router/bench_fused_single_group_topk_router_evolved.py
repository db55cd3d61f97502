"""Micro-benchmark: upstream's original fused_single_group_topk_router path against the evolved fast path.

Run on a GPU: python bench_fused_single_group_topk_router_evolved.py
"""

from unittest import mock

import torch
import triton.testing

from lmdeploy.pytorch.kernels.cuda.moe import route_single_group

CONFIG = ['num_experts', 'top_k', 'routed_scaling_factor']
CASES = [{'num_tokens': 1, 'num_experts': 192, 'top_k': 8, 'routed_scaling_factor': 2.5}, {'num_tokens': 2, 'num_experts': 192, 'top_k': 8, 'routed_scaling_factor': 2.5}, {'num_tokens': 17, 'num_experts': 192, 'top_k': 8, 'routed_scaling_factor': 2.5}, {'num_tokens': 128, 'num_experts': 192, 'top_k': 8, 'routed_scaling_factor': 2.5}, {'num_tokens': 4096, 'num_experts': 192, 'top_k': 8, 'routed_scaling_factor': 2.5}, {'num_tokens': 8192, 'num_experts': 192, 'top_k': 8, 'routed_scaling_factor': 2.5}]


def make_inputs(num_tokens, num_experts, top_k, routed_scaling_factor):
    """Sigmoid scores in (0, 1) and a small correction bias, as the router computes them."""
    scores = torch.rand(num_tokens, num_experts, dtype=torch.float32)
    bias = torch.randn(num_experts, dtype=torch.float32) * 0.1
    return [scores, bias]


def call(launcher, scores, bias, num_experts, top_k, routed_scaling_factor):
    """Top-k weights and expert ids of every token."""
    return launcher(
        scores, bias, num_experts=num_experts, top_k=top_k, routed_scaling_factor=routed_scaling_factor
    )


def gpu_time(fn):
    """The GPU time of one call, from a CUDA graph of it (the launcher's Python cost, which a decode step's
    graph leaves out, is not counted); do_bench's time with the launch where the call cannot be captured."""
    try:
        return triton.testing.do_bench_cudagraph(fn), ''
    except Exception:  # a host synchronisation in the call: no graph
        torch.cuda.synchronize()
        return triton.testing.do_bench(fn), ' (with launch: no CUDA graph)'


def main():
    timings = []
    for case in CASES:
        torch.manual_seed(0)
        inputs = [t.to('cuda') for t in make_inputs(**case)]
        config = {k: case[k] for k in CONFIG}
        run = lambda: call(route_single_group.fused_single_group_topk_router, *inputs, **config)  # noqa: E731
        with mock.patch.object(route_single_group, '_fused_single_group_topk_router_evolved_applies', return_value=False):
            before, note = gpu_time(run)
            before_launch = triton.testing.do_bench(run)
        fast = route_single_group._fused_single_group_topk_router_evolved
        with mock.patch.object(route_single_group, '_fused_single_group_topk_router_evolved', wraps=fast) as spy:
            run()
        after, note_after = gpu_time(run)
        after_launch = triton.testing.do_bench(run)
        # Where the patch keeps upstream's path, both columns time the same code.
        path = '' if spy.called else ' [upstream path]'
        label = ', '.join(f"{k}={v}" for k, v in case.items()) + path + (note or note_after)
        timings.append((label, before, after, before_launch, after_launch))
    print('GPU time per call')
    print(f"{'case':<60} {'original (us)':>14} {'evolved (us)':>13} {'speedup':>8}")
    for label, before, after, _, _ in timings:
        print(f"{label:<60} {before * 1e3:>14.2f} {after * 1e3:>13.2f} {before / after:>7.2f}x")
    print()
    print('Time per call with the launch (triton.testing.do_bench)')
    for label, _, _, before, after in timings:
        print(f"{label:<60} {before * 1e3:>14.2f} {after * 1e3:>13.2f} {before / after:>7.2f}x launch")


if __name__ == '__main__':
    main()
