"""ReLU as a CUDA C++ kernel (KernelBench's CUDA format), for the shipped ``relu`` problem.

The counterpart of ``plugins/ksmith_problems/problems/elementwise/relu.seed.py`` (Triton): one thread per
four floats (a float4 load and store), a grid-stride loop, launched on torch's current stream.

    ksmith eval relu plugins/ksmith_problems/problems/elementwise/relu.cuda.seed.py --backend cuda

``ksmith evolve relu --backend cuda`` starts from this seed (``NAME.BACKEND.seed.py`` beside a problem).
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_cuda_source = """
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

__global__ void relu_float4_kernel(const float4* __restrict__ x, float4* __restrict__ out, int64_t n4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 v = x[i];
        v.x = fmaxf(v.x, 0.0f);
        v.y = fmaxf(v.y, 0.0f);
        v.z = fmaxf(v.z, 0.0f);
        v.w = fmaxf(v.w, 0.0f);
        out[i] = v;
    }
}

__global__ void relu_tail_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t start, int64_t n) {
    int64_t i = start + blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(x[i], 0.0f);
}

torch::Tensor relu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const int64_t n = input.numel();
    const int64_t n4 = n / 4;
    const int threads = 256;
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (n4 > 0) {
        const int64_t wanted = (n4 + threads - 1) / threads;
        const int blocks = (int)std::min<int64_t>(wanted, 65535);
        relu_float4_kernel<<<blocks, threads, 0, stream>>>(
            reinterpret_cast<const float4*>(input.data_ptr<float>()),
            reinterpret_cast<float4*>(out.data_ptr<float>()), n4);
    }
    if (n - 4 * n4 > 0) {
        relu_tail_kernel<<<1, threads, 0, stream>>>(input.data_ptr<float>(), out.data_ptr<float>(), 4 * n4, n);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

relu_cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

relu = load_inline(
    name="ksmith_example_relu",
    cpp_sources=relu_cpp_source,
    cuda_sources=relu_cuda_source,
    functions=["relu_cuda"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = relu

    def forward(self, x):
        return self.relu.relu_cuda(x)
