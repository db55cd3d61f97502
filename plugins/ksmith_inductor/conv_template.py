"""ksmith's Triton convolution, for the convolutions Inductor hands to a library (``extern_kernels.convolution``).

Inductor's default lowering calls cuDNN (oneDNN on CPU) for ``aten.convolution``, so its generated code has no
Triton kernel a seed could start from. Each such call becomes a call of a helper that launches an implicit-GEMM
convolution in Triton: one program per ``BLOCK_M`` output positions (batch and spatial, flattened) by
``BLOCK_N`` output channels of one group; the reduction runs over ``BLOCK_K`` slices of input channel x kernel
offset, gathering the input tile with masks for padding, stride and dilation, ``tl.dot`` with fp32
accumulation, the bias in the epilogue. One kernel covers what ``aten.convolution`` takes: 1-D, 2-D and 3-D
(lower ranks are 3-D with leading extents of 1), stride, padding, dilation, groups (depthwise included), and
transposed convolutions (each output gathers the inputs whose stride grid lands on it; ``output_padding``
only changes the output's size). Inputs, weights and outputs may have any strides, so the channels-last
buffers Inductor plans around a convolution are read and written in place.

Numerics follow the problem's: fp32 operands are multiplied with ``input_precision="ieee"`` (never silently
in TF32), half-precision operands use the tensor cores. This is a correct, general starting point, not a fast
one: the mutate proposer tunes its tiles, and a specialised kernel is for evolution to find.
"""

from __future__ import annotations

CONV_OP = "convolution"
# Keyword arguments of extern_kernels.convolution in Inductor's wrapper, in aten.convolution's order.
CONV_KEYWORDS = ("stride", "padding", "dilation", "transposed", "output_padding", "groups")

START_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2}

_TEMPLATE = '''
@triton.jit
def {kernel}(
    x_ptr,
    w_ptr,
    bias_ptr,
    y_ptr,
    M,
    C_in_g,
    D,
    H,
    W,
    C_out_g,
    OD,
    OH,
    OW,
    KD,
    KH,
    KW,
    sxn,
    sxc,
    sxd,
    sxh,
    sxw,
    swa,
    swb,
    swd,
    swh,
    sww,
    syn,
    syc,
    syd,
    syh,
    syw,
    stride_d,
    stride_h,
    stride_w,
    pad_d,
    pad_h,
    pad_w,
    dil_d,
    dil_h,
    dil_w,
    HAS_BIAS: tl.constexpr,
    TRANSPOSED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # Grid: (output positions, output channels of one group, groups). Implicit GEMM: rows are output
    # positions (n, od, oh, ow), columns output channels, the reduction input channel x kernel offset.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    group = tl.program_id(2).to(tl.int64)
    offs_m = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    ow = offs_m % OW
    rest = offs_m // OW
    oh = rest % OH
    rest = rest // OH
    od = rest % OD
    n = rest // OD
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    co = group * C_out_g + offs_n
    m_mask = offs_m < M
    n_mask = offs_n < C_out_g
    K = C_in_g * KD * KH * KW
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        r = k0 + tl.arange(0, BLOCK_K)
        kw = r % KW
        rest_k = r // KW
        kh = rest_k % KH
        rest_k = rest_k // KH
        kd = rest_k % KD
        ci = rest_k // KD
        cin = group * C_in_g + ci
        k_mask = r < K
        if TRANSPOSED:
            # y[o] gathers x[i] with o = i * stride - pad + k * dil: i = (o + pad - k * dil) / stride, exact.
            td = od[:, None] + pad_d - kd[None, :] * dil_d
            th = oh[:, None] + pad_h - kh[None, :] * dil_h
            tw = ow[:, None] + pad_w - kw[None, :] * dil_w
            id_ = td // stride_d
            ih = th // stride_h
            iw = tw // stride_w
            valid = (td >= 0) & (th >= 0) & (tw >= 0)
            valid &= (td % stride_d == 0) & (th % stride_h == 0) & (tw % stride_w == 0)
            valid &= (id_ < D) & (ih < H) & (iw < W)
            w_ptrs = w_ptr + cin[:, None] * swa + offs_n[None, :] * swb
        else:
            id_ = od[:, None] * stride_d - pad_d + kd[None, :] * dil_d
            ih = oh[:, None] * stride_h - pad_h + kh[None, :] * dil_h
            iw = ow[:, None] * stride_w - pad_w + kw[None, :] * dil_w
            valid = (id_ >= 0) & (id_ < D) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            w_ptrs = w_ptr + co[None, :] * swa + ci[:, None] * swb
        x_ptrs = x_ptr + n[:, None] * sxn + cin[None, :] * sxc + id_ * sxd + ih * sxh + iw * sxw
        a = tl.load(x_ptrs, mask=valid & m_mask[:, None] & k_mask[None, :], other=0.0)
        w_ptrs += kd[:, None] * swd + kh[:, None] * swh + kw[:, None] * sww
        b = tl.load(w_ptrs, mask=k_mask[:, None] & n_mask[None, :], other=0.0)
        # "ieee": full fp32 products for fp32 operands, as eager PyTorch computes them (half operands use the
        # tensor cores either way); one literal, so a dot_precision edit changes what the kernel computes.
        acc = tl.dot(a, b, acc, input_precision="ieee")
    if HAS_BIAS:
        acc += tl.load(bias_ptr + co, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    y_ptrs = y_ptr + n[:, None] * syn + co[None, :] * syc + od[:, None] * syd + oh[:, None] * syh
    y_ptrs += ow[:, None] * syw
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


def {helper}(x, w, bias, stride, padding, dilation, transposed, output_padding, groups, out=None):
    """aten.convolution(x, w, bias, ...) into ``out`` (allocated contiguous when None): {call}."""
    nd = x.dim() - 2
    stride, padding, dilation, output_padding = (
        (1,) * (3 - nd) + tuple(stride),
        (0,) * (3 - nd) + tuple(padding),
        (1,) * (3 - nd) + tuple(dilation),
        (0,) * (3 - nd) + tuple(output_padding),
    )
    x5 = x.reshape(x.shape[:2] + (1,) * (3 - nd) + x.shape[2:]) if nd < 3 else x
    w5 = w.reshape(w.shape[:2] + (1,) * (3 - nd) + w.shape[2:]) if nd < 3 else w
    N, C_in, D, H, W = x5.shape
    KD, KH, KW = w5.shape[2:]
    C_out = w5.shape[1] * groups if transposed else w5.shape[0]
    if out is None:
        spatial = []
        for size, k, s, p, d, extra in zip((D, H, W), (KD, KH, KW), stride, padding, dilation, output_padding):
            if transposed:
                spatial.append((size - 1) * s - 2 * p + d * (k - 1) + extra + 1)
            else:
                spatial.append((size + 2 * p - d * (k - 1) - 1) // s + 1)
        out = torch.empty((N, C_out, *spatial[3 - nd :]), dtype=x.dtype, device=x.device)
    y5 = out.reshape(out.shape[:2] + (1,) * (3 - nd) + out.shape[2:]) if nd < 3 else out
    OD, OH, OW = y5.shape[2:]
    M = N * OD * OH * OW
    C_out_g = C_out // groups
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(C_out_g, meta["BLOCK_N"]), groups)
    {kernel}[grid](
        x5,
        w5,
        bias if bias is not None else w5,
        y5,
        M,
        C_in // groups,
        D,
        H,
        W,
        C_out_g,
        OD,
        OH,
        OW,
        KD,
        KH,
        KW,
        *x5.stride(),
        *w5.stride(),
        *y5.stride(),
        *stride,
        *padding,
        *dilation,
        HAS_BIAS=bias is not None,
        TRANSPOSED=bool(transposed),
        {config},
    )
    return out
'''


def conv_text(index: int) -> tuple[str, str]:
    """(the name of the helper to call, the kernel and helper source) for the ``index``-th convolution."""
    kernel, helper = f"_conv_{index}_kernel", f"_conv_{index}"
    config = ",\n        ".join(f"{k}={v}" for k, v in START_CONFIG.items())
    text = _TEMPLATE.format(
        kernel=kernel,
        helper=helper,
        config=config,
        call="aten.convolution, a library call in Inductor's code",
    )
    return helper, text.strip("\n")
