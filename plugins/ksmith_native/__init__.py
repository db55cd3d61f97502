"""ksmith built-in plugin: the ``cuda`` backend for native kernels (KernelBench's CUDA format).

A candidate is a module defining ``ModelNew`` whose kernels are C++/CUDA sources built with
``torch.utils.cpp_extension.load_inline`` (KernelBench's CUDA candidates, as they are). The backend:

1. reads every ``load_inline`` call from the source with ``ast`` (the driver never runs candidate code), so
   its arguments must be constants of the module (``spec.py``);
2. builds each extension before the candidate's process starts, outside the GPU lock, several at once, with
   a cache keyed by sources, flags and toolchain (``build.py``, ``build_child.py``); a compiler error is a
   ``compile_error`` verdict with the compiler's first lines;
3. refuses libraries that compute for the candidate (cuBLAS, cuDNN, ... in the extension's undefined
   symbols: ``symbols.py``);
4. evaluates under the Triton backend's protocol, reused as it is (``ksmith_triton.evaluator``): a child
   process, fresh seeds, poisoned outputs, the reference in another process, timing, and the guards'
   dispatch accounting. In the candidate's process ``load_inline`` loads the prebuilt library instead of
   compiling, and calls into it are the launches counted (``candidate_hooks.py``); torch ops dispatched
   inside ``forward`` -- also those the C++ code dispatches, ``torch::matmul`` say -- are refused as for
   Triton.
"""
