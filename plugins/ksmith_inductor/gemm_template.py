"""ksmith's Triton GEMM, for the matmuls Inductor hands to a library (``extern_kernels.mm``, ``bmm``,
``addmm``, ``baddbmm``).

Inductor's default lowering calls cuBLAS for these, so its generated code has no Triton kernel a seed could
start from. Each such call becomes a call of a small helper that launches a tiled Triton matmul written in
the idiom the mutate proposer's tiling edits recognise (``gemm_config``, ``dot_tile``, ``tma_loads``): one
program per ``BLOCK_M x BLOCK_N`` output tile of one batch, tiles ordered in ``GROUP_M`` groups, ``tl.dot`` over
K with masked loads, fp32 accumulation, the launch configuration as literal keywords. ``addmm`` /
``baddbmm``'s ``beta * bias + alpha * (a @ b)`` is applied in the kernel's epilogue; the pointwise work
Inductor fuses after the matmul stays in Inductor's own kernels.

Numerics follow the problem's: fp32 operands are multiplied with ``input_precision="ieee"`` (what eager
PyTorch does by default), never silently in TF32; half-precision operands use the tensor cores as cuBLAS does.
Each call site gets its own kernel, so each can be tuned on its own.
"""

from __future__ import annotations

GEMM_OPS = {  # extern op -> (positional operands, has a bias)
    "mm": (("a", "b"), False),
    "bmm": (("a", "b"), False),
    "addmm": (("bias", "a", "b"), True),
    "baddbmm": (("bias", "a", "b"), True),
}

# The seed's starting configuration (the suite's hand-written GEMM seeds start here too); the mutate
# proposer's ``gemm_config`` edit moves it to Inductor's own template configurations.
START_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}

_TEMPLATE = '''
@triton.jit
def {kernel}(
    a_ptr,
    b_ptr,
    c_ptr,
    bias_ptr,
    M,
    N,
    K,
    stride_ab,
    stride_am,
    stride_ak,
    stride_bb,
    stride_bk,
    stride_bn,
    stride_cb,
    stride_cm,
    stride_cn,
    stride_db,
    stride_dm,
    stride_dn,
    alpha,
    beta,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # Grid: (output tiles of one matrix, batch). Tiles are visited in GROUP_M-row groups.
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + batch * stride_ab + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bb + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k) & (offs_n[None, :] < N), other=0.0)
        # "ieee": fp32 operands get full fp32 products, as eager PyTorch computes them (the precision only
        # applies to fp32 x fp32; half operands use the tensor cores either way). One literal, so the mutate
        # proposer's dot_precision edit changes the product the kernel computes.
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    acc = acc * alpha
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if HAS_BIAS:
        d_ptrs = bias_ptr + batch * stride_db + offs_m[:, None] * stride_dm + offs_n[None, :] * stride_dn
        acc += beta * tl.load(d_ptrs, mask=mask, other=0.0).to(tl.float32)
    c_ptrs = c_ptr + batch * stride_cb + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


def {helper}(a, b, out, bias=None, alpha=1.0, beta=1.0):
    """out = beta * bias + alpha * (a @ b), for 2-D or batched 3-D operands ({op} in Inductor's code)."""
    a3 = a if a.dim() == 3 else a.unsqueeze(0)
    b3 = b if b.dim() == 3 else b.unsqueeze(0)
    c3 = out if out.dim() == 3 else out.unsqueeze(0)
    d3 = c3 if bias is None else torch.broadcast_to(bias, out.shape)
    d3 = d3 if d3.dim() == 3 else d3.unsqueeze(0)
    batch, M, K = a3.shape
    N = b3.shape[2]
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), batch)
    {kernel}[grid](
        a3,
        b3,
        c3,
        d3,
        M,
        N,
        K,
        a3.stride(0),
        a3.stride(1),
        a3.stride(2),
        b3.stride(0),
        b3.stride(1),
        b3.stride(2),
        c3.stride(0),
        c3.stride(1),
        c3.stride(2),
        d3.stride(0),
        d3.stride(1),
        d3.stride(2),
        float(alpha),
        float(beta),
        HAS_BIAS=bias is not None,
        {config},
    )
    return out
'''


def gemm_text(index: int, op: str) -> tuple[str, str]:
    """(the name of the helper to call, the kernel and helper source) for the ``index``-th GEMM call."""
    kernel, helper = f"_gemm_{index}_kernel", f"_gemm_{index}"
    config = ",\n        ".join(f"{k}={v}" for k, v in START_CONFIG.items())
    text = _TEMPLATE.format(kernel=kernel, helper=helper, op=op, config=config)
    return helper, text.strip("\n")
