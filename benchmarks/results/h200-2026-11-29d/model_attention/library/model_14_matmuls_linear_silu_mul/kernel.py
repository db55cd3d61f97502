"""Seed for a harvested gate/up pair, silu(in0 @ gate.T) * (in0 @ up.T): one Triton kernel streams both
weights over one read of the input and writes only the product (written by ksmith harvest)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gate_up_kernel(
    x_ptr, wg_ptr, wu_ptr, out_ptr, M, N, K,
    IEEE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        w_mask = (rn[None, :] < N) & (rk[:, None] < K)
        wg = tl.load(wg_ptr + rn[None, :] * K + rk[:, None], mask=w_mask, other=0.0)
        wu = tl.load(wu_ptr + rn[None, :] * K + rk[:, None], mask=w_mask, other=0.0, cache_modifier=".cg")
        if IEEE:
            acc_g += tl.dot(x, wg, input_precision="ieee")
            acc_u += tl.dot(x, wu, input_precision="ieee")
        else:
            acc_g += tl.dot(x, wg)
            acc_u += tl.dot(x, wu)
    # Each step rounded to the output dtype as eager does: both products, the SiLU, the product of the two.
    gate = acc_g.to(out_ptr.dtype.element_ty).to(tl.float32)
    up = acc_u.to(out_ptr.dtype.element_ty)
    y = (gate / (1.0 + tl.exp(-gate))).to(out_ptr.dtype.element_ty) * up
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.p0 = nn.Parameter(torch.randn([8192, 2048], dtype=torch.bfloat16) / 45.2548)
        self.p1 = nn.Parameter(torch.randn([8192, 2048], dtype=torch.bfloat16) / 45.2548)

    def forward(self, in0):
        x = in0.reshape(-1, in0.shape[-1]).contiguous()
        gate, up = self.p0.contiguous(), self.p1.contiguous()
        M, K = x.shape
        N = gate.shape[0]
        out = torch.empty((M, N), dtype=in0.dtype, device=in0.device)
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 32))
        _gate_up_kernel[grid](
            x, gate, up, out, M, N, K, IEEE=x.dtype == torch.float32,
            BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, num_warps=4, num_stages=3,
        )
        return out.reshape(*in0.shape[:-1], N)
