"""Conv2d + bias + ReLU: torch convolves, then a program per (N*C plane, block) adds bias, applies ReLU.

The problem allows aten.convolution; the kernel reads the convolution's output once, adds the
per-channel bias in fp32, applies ReLU and writes fp16.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _ksmith_channels_last_kernel(x_ptr, out_ptr, channels, hw, BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    # Grid: (samples x blocks of positions, blocks of channels). A tile of NCHW rows is read along the
    # positions and written along the channels (Triton moves it through shared memory: both sides coalesced).
    blocks = tl.cdiv(hw, BLOCK_P)
    sample = (tl.program_id(0) // blocks).to(tl.int64)
    pos = (tl.program_id(0) % blocks) * BLOCK_P + tl.arange(0, BLOCK_P)
    chan = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (chan[:, None] < channels) & (pos[None, :] < hw)
    base = sample * channels * hw
    tile = tl.load(x_ptr + base + chan[:, None] * hw + pos[None, :], mask=mask)
    tl.store(out_ptr + base + pos[None, :] * channels + chan[:, None], tile, mask=mask)


def _ksmith_channels_last(t):
    # The same values in channels-last (NHWC) memory order, for cuDNN's NHWC convolutions.
    t = t.contiguous()
    n, c, h, w = t.shape
    out = torch.empty((n, h, w, c), device=t.device, dtype=t.dtype).permute(0, 3, 1, 2)
    grid = lambda meta: (n * triton.cdiv(h * w, meta["BLOCK_P"]), triton.cdiv(c, meta["BLOCK_C"]))
    _ksmith_channels_last_kernel[grid](t, out, c, h * w, BLOCK_C=64, BLOCK_P=64, num_warps=4)
    return out


@triton.jit
def _bias_relu_kernel_channels_last(y_ptr, out_ptr, conv_bias_ptr, bias_ptr, n_channels, hw_size, stride_n, stride_c, stride_p, HAS_CONV_BIAS: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    # _bias_relu_kernel's epilogue over (sample and positions, channels) tiles of the convolution's output, read
    # in its own (channels-last) order; the result is written in NCHW order.
    blocks = tl.cdiv(hw_size, BLOCK_P)
    sample = (tl.program_id(0) // blocks).to(tl.int64)
    pos = (tl.program_id(0) % blocks) * BLOCK_P + tl.arange(0, BLOCK_P)
    chan = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    chan_mask = chan < n_channels
    tile_mask = chan_mask[:, None] & (pos[None, :] < hw_size)
    value = tl.load(y_ptr + sample * stride_n + chan[:, None] * stride_c + pos[None, :] * stride_p, mask=tile_mask)
    if HAS_CONV_BIAS:
        conv_bias = tl.load(conv_bias_ptr + chan, mask=chan_mask).to(tl.float32)
        value = (value.to(tl.float32) + conv_bias[:, None]).to(y_ptr.dtype.element_ty)
    result = ((tl.maximum((value.to(tl.float32)) + (tl.load(bias_ptr + chan, mask=chan_mask)[:, None].to(tl.float32)), 0.0)).to(out_ptr.dtype.element_ty))
    tl.store(out_ptr + sample * n_channels * hw_size + chan[:, None] * hw_size + pos[None, :], result, mask=tile_mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels, out_channels, kernel_size, padding=kernel_size // 2, dtype=torch.float16
        )
        self.bias = nn.Parameter(0.1 * torch.randn(out_channels, 1, 1).to(torch.float16))

    def forward(self, x):
        # The problem allows the convolution itself (aten.convolution); the epilogue runs in Triton.
        y = F.conv2d(_ksmith_channels_last(x), _ksmith_channels_last(self.conv.weight), None, padding=self.conv.padding)
        out = torch.empty_like(y, memory_format=torch.contiguous_format)
        batch, channels, height, width = y.shape
        hw = height * width
        grid = lambda meta: (batch * channels, triton.cdiv(hw, meta["BLOCK_SIZE"]))
        _bias_relu_kernel_channels_last[lambda meta: (y.shape[0] * triton.cdiv(y.shape[2] * y.shape[3], meta["BLOCK_P"]), triton.cdiv(y.shape[1], meta["BLOCK_C"]))](y, out, self.conv.bias if self.conv.bias is not None else y, self.bias, y.shape[1], y.shape[2] * y.shape[3], y.stride(0), y.stride(1), y.stride(3), HAS_CONV_BIAS=self.conv.bias is not None, BLOCK_C=64, BLOCK_P=64, num_warps=4)
        return out
