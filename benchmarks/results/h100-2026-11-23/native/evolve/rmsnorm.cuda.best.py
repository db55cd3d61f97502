"""RMSNorm as a CUDA C++ kernel (KernelBench's CUDA format), for the shipped ``rmsnorm`` problem.

The counterpart of ``plugins/ksmith_problems/problems/normalization/rmsnorm.seed.py`` (Triton): one block of
256 threads per row; the row's sum of squares is a block reduction (warp shuffles, then one warp over the
warps' results); a second pass scales by 1/rms and the weight.

    ksmith eval rmsnorm plugins/ksmith_problems/problems/normalization/rmsnorm.cuda.seed.py --backend cuda
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

rmsnorm_cuda_source = """
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

constexpr int THREADS = 512;

__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll 4
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

__global__ void rmsnorm_rows_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                    float* __restrict__ out, int64_t cols, float eps) {
    __shared__ float shared[THREADS / 32];
    const float* row = x + blockIdx.x * cols;
    float* out_row = out + blockIdx.x * cols;

    float sum = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) sum += row[c] * row[c];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    sum = warp_sum(sum);
    if (lane == 0) shared[warp] = sum;
    __syncthreads();
    sum = lane < THREADS / 32 ? shared[lane] : 0.0f;
    sum = warp_sum(sum);

    const float inverse_rms = rsqrtf(sum / (float)cols + eps);
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) out_row[c] = row[c] * inverse_rms * weight[c];
}

torch::Tensor rmsnorm_cuda(torch::Tensor x, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda(), "x and weight must be CUDA tensors");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32,
                "x and weight must be float32");
    auto input = x.contiguous();
    auto w = weight.contiguous();
    const int64_t cols = input.size(-1);
    TORCH_CHECK(w.numel() == cols, "weight must have the last dimension's size");
    auto out = torch::empty_like(input);
    const int64_t rows = cols > 0 ? input.numel() / cols : 0;
    if (rows > 0) {
        rmsnorm_rows_kernel<<<(unsigned int)rows, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
            input.data_ptr<float>(), w.data_ptr<float>(), out.data_ptr<float>(), cols, (float)eps);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return out;
}
"""

rmsnorm_cpp_source = "torch::Tensor rmsnorm_cuda(torch::Tensor x, torch::Tensor weight, double eps);"

rmsnorm = load_inline(
    name="ksmith_example_rmsnorm",
    cpp_sources=rmsnorm_cpp_source,
    cuda_sources=rmsnorm_cuda_source,
    functions=["rmsnorm_cuda"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
)


class ModelNew(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x):
        return rmsnorm.rmsnorm_cuda(x, self.weight, self.eps)
