"""Row-wise softmax as a CUDA C++ kernel (KernelBench's CUDA format), for the shipped ``softmax`` problem.

The counterpart of ``plugins/ksmith_problems/problems/softmax/softmax.seed.py`` (Triton): one block of 256
threads per row; the row's maximum and its sum of exponentials are block reductions (warp shuffles, then
one warp over the warps' results); three passes over the row, the last one writing.

    ksmith eval softmax plugins/ksmith_problems/problems/softmax/softmax.cuda.seed.py --backend cuda
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

softmax_cuda_source = """
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

constexpr int THREADS = 512;

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

// Every thread gets the block's result. `shared` holds one value per warp.
template <bool IS_MAX>
__device__ float block_reduce(float v, float* shared) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    v = IS_MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    const float neutral = IS_MAX ? -INFINITY : 0.0f;
    v = lane < THREADS / 32 ? shared[lane] : neutral;
    v = IS_MAX ? warp_max(v) : warp_sum(v);
    __syncthreads();  // `shared` is reused by the next reduction
    return v;
}

__global__ void softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t cols) {
    __shared__ float shared[THREADS / 32];
    const float* row = x + blockIdx.x * cols;
    float* out_row = out + blockIdx.x * cols;

    float row_max = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) row_max = fmaxf(row_max, row[c]);
    row_max = block_reduce<true>(row_max, shared);

    float row_sum = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) row_sum += expf(row[c] - row_max);
    row_sum = block_reduce<false>(row_sum, shared);

    const float inverse = 1.0f / row_sum;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) out_row[c] = expf(row[c] - row_max) * inverse;
}

torch::Tensor softmax_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() >= 1, "x must have a last dimension");
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const int64_t cols = input.size(-1);
    const int64_t rows = cols > 0 ? input.numel() / cols : 0;
    if (rows > 0) {
        softmax_rows_kernel<<<(unsigned int)rows, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
            input.data_ptr<float>(), out.data_ptr<float>(), cols);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return out;
}
"""

softmax_cpp_source = "torch::Tensor softmax_cuda(torch::Tensor x);"

softmax = load_inline(
    name="ksmith_example_softmax",
    cpp_sources=softmax_cpp_source,
    cuda_sources=softmax_cuda_source,
    functions=["softmax_cuda"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.softmax = softmax

    def forward(self, x):
        return self.softmax.softmax_cuda(x)
