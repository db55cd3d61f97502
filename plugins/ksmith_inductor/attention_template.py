"""ksmith's Triton attention, for the scaled-dot-product attention Inductor leaves to ATen.

Inductor runs ``F.scaled_dot_product_attention`` as a fallback to ATen's fused kernels (flash, memory-efficient
or cuDNN attention on CUDA, the flash kernel for CPU), so its generated code has no Triton kernel for it. Each
such call becomes a call of a helper that launches a flash-attention forward in Triton: one program per
``BLOCK_M`` queries of one (batch, head) and ``BLOCK_DV`` output features; keys and values stream through in
``BLOCK_N`` blocks with an online softmax (running max and sum, ``exp2`` with the scale folded in), ``tl.dot``
with fp32 accumulation, the causal mask (top-left aligned, as ATen's ``is_causal``) skipping the blocks above
the diagonal. The score ``q @ k^T`` is accumulated over ``BLOCK_D`` slices of the head dimension, so any head
size works; when one slice holds the whole head the query tile is loaded once (``Q_RESIDENT``). Heads larger
than one output tile are split over programs (``BLOCK_DV``), each recomputing the scores it needs.

Numerics follow the problem's: fp32 operands are multiplied with ``input_precision="ieee"`` (never silently in
TF32), half-precision operands use the tensor cores (the precision applies to fp32 x fp32 only, so each product
is one ``tl.dot`` with that literal, which the mutate proposer's ``dot_precision`` edit changes). What is refused, in one line: an attention mask or bias,
dropout, and queries whose heads differ from the keys' (grouped-query attention).
"""

from __future__ import annotations

# ATen's attention ops as Inductor's wrapper calls them: positional parameter names (after q, k, v).
ATTENTION_OPS = {
    "_scaled_dot_product_flash_attention_for_cpu": ("dropout_p", "is_causal"),
    "_scaled_dot_product_flash_attention": ("dropout_p", "is_causal", "return_debug_mask"),
    "_scaled_dot_product_efficient_attention": ("attn_bias", "compute_log_sumexp", "dropout_p", "is_causal"),
    "_scaled_dot_product_cudnn_attention": (
        "attn_bias",
        "compute_log_sumexp",
        "dropout_p",
        "is_causal",
        "return_debug_mask",
    ),
}

START_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
# Largest head slice (score reduction) and output tile one program holds.
MAX_BLOCK_D = 128
MAX_BLOCK_DV = 128

_TEMPLATE = '''
@triton.jit
def {kernel}(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    H,
    Lq,
    Lk,
    D,
    DV,
    sqb,
    sqh,
    sqm,
    sqd,
    skb,
    skh,
    skn,
    skd,
    svb,
    svh,
    svn,
    svd,
    sob,
    soh,
    som,
    sod,
    scale,
    CAUSAL: tl.constexpr,
    Q_RESIDENT: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # Grid: (query blocks, batch x heads, output-feature blocks).
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    pid_dv = tl.program_id(2)
    b = bh // H
    h = bh % H
    q_base = q_ptr + b * sqb + h * sqh
    k_base = k_ptr + b * skb + h * skh
    v_base = v_ptr + b * svb + h * svh
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_dv = pid_dv * BLOCK_DV + tl.arange(0, BLOCK_DV)
    offs_d = tl.arange(0, BLOCK_D)
    m_mask = offs_m < Lq
    if Q_RESIDENT:
        q = tl.load(
            q_base + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
            mask=m_mask[:, None] & (offs_d[None, :] < D),
            other=0.0,
        )
    qk_scale = scale * 1.4426950408889634  # softmax in base 2
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    hi = Lk
    if CAUSAL:
        hi = tl.minimum(Lk, (pid_m + 1) * BLOCK_M)
    for n0 in range(0, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        n_mask = offs_n < Lk
        s = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        if Q_RESIDENT:
            k = tl.load(
                k_base + offs_d[:, None] * skd + offs_n[None, :] * skn,
                mask=(offs_d[:, None] < D) & n_mask[None, :],
                other=0.0,
            )
            s = tl.dot(q, k, s, input_precision="ieee")
        else:
            for d0 in range(0, D, BLOCK_D):
                d = d0 + offs_d
                q_part = tl.load(
                    q_base + offs_m[:, None] * sqm + d[None, :] * sqd,
                    mask=m_mask[:, None] & (d[None, :] < D),
                    other=0.0,
                )
                k_part = tl.load(
                    k_base + d[:, None] * skd + offs_n[None, :] * skn,
                    mask=(d[:, None] < D) & n_mask[None, :],
                    other=0.0,
                )
                s = tl.dot(q_part, k_part, s, input_precision="ieee")
        s = s * qk_scale
        keep = n_mask[None, :]
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_base + offs_n[:, None] * svn + offs_dv[None, :] * svd,
            mask=n_mask[:, None] & (offs_dv[None, :] < DV),
            other=0.0,
        )
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision="ieee")
        m_i = m_new
    acc = acc / l_i[:, None]
    o_ptrs = o_ptr + b * sob + h * soh + offs_m[:, None] * som + offs_dv[None, :] * sod
    tl.store(o_ptrs, acc.to(o_ptr.dtype.element_ty), mask=m_mask[:, None] & (offs_dv[None, :] < DV))


def {helper}(q, k, v, is_causal=False, scale=None, out=None):
    """softmax(q @ k^T * scale) @ v over the last two dimensions ({call}); ``out`` is allocated contiguous
    when None. Returns (out,) like the first of ATen's results; the others (log-sum-exp, ...) are not made."""
    if k.shape[:-2] != q.shape[:-2] or v.shape[:-1] != k.shape[:-1]:
        raise ValueError(f"attention over q {{tuple(q.shape)}}, k {{tuple(k.shape)}}, v {{tuple(v.shape)}}: heads differ")
    *lead, Lq, D = q.shape
    Lk, DV = k.shape[-2], v.shape[-1]
    q4, k4, v4 = (t.reshape((-1, 1, *t.shape[-2:])) if t.dim() == 3 else t for t in (q, k, v))
    if out is None:
        out = torch.empty((*lead, Lq, DV), dtype=q.dtype, device=q.device)
    o4 = out.reshape((-1, 1, Lq, DV)) if out.dim() == 3 else out
    B, H = q4.shape[0], q4.shape[1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    BLOCK_D = min(max(16, triton.next_power_of_2(D)), {max_block_d})
    BLOCK_DV = min(max(16, triton.next_power_of_2(DV)), {max_block_dv})
    grid = lambda meta: (triton.cdiv(Lq, meta["BLOCK_M"]), B * H, triton.cdiv(DV, BLOCK_DV))
    {kernel}[grid](
        q4,
        k4,
        v4,
        o4,
        H,
        Lq,
        Lk,
        D,
        DV,
        *q4.stride(),
        *k4.stride(),
        *v4.stride(),
        *o4.stride(),
        float(scale),
        CAUSAL=bool(is_causal),
        Q_RESIDENT=BLOCK_D >= D,
        BLOCK_D=BLOCK_D,
        BLOCK_DV=BLOCK_DV,
        {config},
    )
    return (out,)
'''


def attention_text(index: int, op: str) -> tuple[str, str]:
    """(the name of the helper to call, the kernel and helper source) for the ``index``-th attention call."""
    kernel, helper = f"_attention_{index}_kernel", f"_attention_{index}"
    config = ",\n        ".join(f"{k}={v}" for k, v in START_CONFIG.items())
    text = _TEMPLATE.format(
        kernel=kernel,
        helper=helper,
        config=config,
        call=f"aten.{op} in Inductor's code",
        max_block_d=MAX_BLOCK_D,
        max_block_dv=MAX_BLOCK_DV,
    )
    return helper, text.strip("\n")
