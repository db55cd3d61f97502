"""Seed for a harvested linear + add region: a tiled Triton GEMM, fp32 accumulation (written by ksmith harvest)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear_kernel(
    x_ptr, w_ptr, r_ptr, out_ptr, M, N, K,
    EPILOGUE: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # EPILOGUE: 0 none, 1 (+ r), 2 (* r), 3 silu(.) * r; each step rounded to the output dtype as eager does.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
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
    offs = rm[:, None] * N + rn[None, :]
    y = acc.to(out_ptr.dtype.element_ty)
    if EPILOGUE == 3:
        yf = y.to(tl.float32)
        y = (yf / (1.0 + tl.exp(-yf))).to(out_ptr.dtype.element_ty)
    if EPILOGUE == 1:
        y = y + tl.load(r_ptr + offs, mask=mask, other=0.0)
    if EPILOGUE >= 2:
        y = y * tl.load(r_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.p0 = nn.Parameter(torch.randn([2048, 2048], dtype=torch.bfloat16) / 45.2548)

    def forward(self, in0, in1):
        x = in0.reshape(-1, in0.shape[-1]).contiguous()
        w = self.p0.contiguous()
        M, K = x.shape
        N = w.shape[0]
        out = torch.empty((M, N), dtype=in0.dtype, device=in0.device)
        other = in1.reshape(M, N).contiguous()
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
        _linear_kernel[grid](
            x, w, other, out, M, N, K,
            EPILOGUE=1, IEEE=x.dtype == torch.float32, BLOCK_M=16, BLOCK_N=16, BLOCK_K=512, num_warps=2, num_stages=5,
        )
        return out.reshape(*in0.shape[:-1], N)
