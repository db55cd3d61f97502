"""Seed for a harvested group of 3 projections of one input, in0 @ w.T for each w: one Triton launch,
its third grid axis picking the projection (written by ksmith harvest)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _grouped_linear_kernel(
    x_ptr, w0_ptr, w1_ptr, w2_ptr, o0_ptr, o1_ptr, o2_ptr, N0, N1, N2, M, K,
    IEEE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    which = tl.program_id(2)
    w_ptr, o_ptr, N = w0_ptr, o0_ptr, N0
    if which == 1:
        w_ptr, o_ptr, N = w1_ptr, o1_ptr, N1
    if which == 2:
        w_ptr, o_ptr, N = w2_ptr, o2_ptr, N2
    if pid_n * BLOCK_N >= N:  # the grid spans the widest projection: past a narrower one's columns, no work
        return
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        if IEEE:
            acc += tl.dot(x, w, input_precision="ieee")
        else:
            acc += tl.dot(x, w)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], acc.to(o_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.p0 = nn.Parameter(torch.randn([2048, 2048], dtype=torch.bfloat16) / 45.2548)
        self.p1 = nn.Parameter(torch.randn([512, 2048], dtype=torch.bfloat16) / 45.2548)
        self.p2 = nn.Parameter(torch.randn([512, 2048], dtype=torch.bfloat16) / 45.2548)

    def forward(self, in0):
        x = in0.reshape(-1, in0.shape[-1]).contiguous()
        ws = [w.contiguous() for w in (self.p0, self.p1, self.p2,)]
        M, K = x.shape
        outs = [torch.empty((M, w.shape[0]), dtype=in0.dtype, device=in0.device) for w in ws]
        # A missing projection has no columns and tensors of its own (never one of the others': a compiler that
        # makes the launch functional would copy an aliased output apart from the one the kernel writes).
        spare = [x.new_empty(1) for _ in range(3 - len(ws))]
        w3, o3 = ws + spare, outs + [x.new_empty(1) for _ in spare]
        n3 = [w.shape[0] for w in ws] + [0] * len(spare)
        grid = (triton.cdiv(M, 16), triton.cdiv(max(n3), 32), len(ws))
        _grouped_linear_kernel[grid](
            x, *w3, *o3, *n3, M, K, IEEE=x.dtype == torch.float32,
            BLOCK_M=16, BLOCK_N=32, BLOCK_K=256, num_warps=2, num_stages=5,
        )
        return tuple(o.reshape(*in0.shape[:-1], o.shape[-1]) for o in outs)
