"""Seed for a harvested linear + add region at a decode shape, K long beside N: each column slice's K is split
over SPLIT programs of one launch; the last of them to finish adds their partials in a fixed order (the same
sum every call), rounds, applies the epilogue and stores (written by ksmith harvest)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _split_linear_kernel(
    x_ptr, w_ptr, r_ptr, out_ptr, part_ptr, arrived_ptr, M, N, K,
    EPILOGUE: tl.constexpr, SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # EPILOGUE: 0 none, 1 (+ r), 2 (* r), 3 silu(.) * r; each step rounded to the output dtype as eager does.
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    rm = tl.arange(0, BLOCK_M)  # every row in one tile
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    span = tl.cdiv(tl.cdiv(K, SPLIT), BLOCK_K) * BLOCK_K
    k_end = tl.minimum(split * span + span, K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(split * span, split * span + span, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < k_end), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < k_end), other=0.0)
        acc += tl.dot(x, w)
    # The partials are [SPLIT, M, N] fp32 (whatever BLOCK_M is). A column slice's count of arrivals is zero
    # between calls: its last program resets it.
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * N + rn[None, :]
    tl.store(part_ptr + split * M * N + offs, acc, mask=mask)
    tl.debug_barrier()  # every thread's partial written before the count says so
    if tl.atomic_add(arrived_ptr + pid_n, 1, sem="acq_rel") == SPLIT - 1:
        total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for i in tl.static_range(SPLIT):
            total += tl.load(part_ptr + i * M * N + offs, mask=mask, other=0.0, cache_modifier=".cg")
        y = total.to(out_ptr.dtype.element_ty)
        if EPILOGUE == 3:
            yf = y.to(tl.float32)
            y = (yf / (1.0 + tl.exp2((-yf) * 1.4426950408889634))).to(out_ptr.dtype.element_ty)
        if EPILOGUE == 1:
            y = y + tl.load(r_ptr + offs, mask=mask, other=0.0)
        if EPILOGUE >= 2:
            y = y * tl.load(r_ptr + offs, mask=mask, other=0.0)
        tl.store(out_ptr + offs, y, mask=mask)
        tl.atomic_xchg(arrived_ptr + pid_n, 0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.p0 = nn.Parameter(torch.randn([2048, 8192], dtype=torch.bfloat16) / 90.5097)
        # One arrival count per output column (enough for any BLOCK_N), made once and left at zero by each call.
        self.register_buffer("arrived", torch.zeros(self.p0.shape[0], dtype=torch.int32), persistent=False)

    def forward(self, in0, in1):
        x = in0.reshape(-1, in0.shape[-1]).contiguous()
        w = self.p0.contiguous()
        M, K = x.shape
        N = w.shape[0]
        split = 4
        out = torch.empty((M, N), dtype=in0.dtype, device=in0.device)
        partials = torch.empty((split, M, N), dtype=torch.float32, device=in0.device)
        other = in1.reshape(M, N).contiguous()
        grid = (triton.cdiv(N, 16), split)
        _split_linear_kernel[grid](
            x, w, other, out, partials, self.arrived, M, N, K,
            EPILOGUE=1, SPLIT=split, BLOCK_M=16, BLOCK_N=16, BLOCK_K=128, num_warps=2, num_stages=4,
        )
        return out.reshape(*in0.shape[:-1], N)
