"""Hand-made variants of an imported upstream kernel (`ksmith import`), each checked against the seed's outputs
and timed beside the seed at several sizes with triton.testing.do_bench_cudagraph: the kernels' GPU time, without
the launcher's Python cost (larger than the kernel here). The exploration that docs/benchmarks.md section 7b
starts from; not a bench of evolved kernels.

    python benchmarks/upstream_variants.py DIR   # DIR: `ksmith import sglang normal_decode_set_metadata -o DIR`

The one variant here: SGLang's decode-metadata kernel computes the requests' lengths and their prefix sum in
one program, a scalar loop over the batch; the variant does it a block of requests at a time with tl.cumsum.
"""

import importlib.util
import os
import sys
import tempfile

import torch
import triton

SERIAL = """        acc = 0
        for idx in range(B):
            seq = tl.load(seq_lens + idx * seq_lens_stride_0)
            val = (seq + SEQ_LEN_DELTA).to(tl.int32)
            tl.store(cache_seqlens_int32 + idx * cache_seqlens_int32_stride_0, val)
            tl.store(cu_seqlens_k + idx * cu_seqlens_k_stride_0, acc)
            acc += val
"""
BLOCKED = """        acc = 0
        for idx_start in range(0, B, {block}):
            idx = idx_start + tl.arange(0, {block})
            idx_mask = idx < B
            seq = tl.load(seq_lens + idx * seq_lens_stride_0, mask=idx_mask, other=0)
            val = tl.where(idx_mask, (seq + SEQ_LEN_DELTA).to(tl.int32), 0)
            tl.store(cache_seqlens_int32 + idx * cache_seqlens_int32_stride_0, val, mask=idx_mask)
            tl.store(cu_seqlens_k + idx * cu_seqlens_k_stride_0, acc + tl.cumsum(val, 0) - val, mask=idx_mask)
            acc += tl.sum(val, 0)
"""


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton reads kernel sources through the module
    spec.loader.exec_module(module)
    return module


def from_text(text, name):
    path = os.path.join(tempfile.mkdtemp(), name + ".py")
    with open(path, "w") as fh:
        fh.write(text)
    return load(path, name)


def main(directory):
    name = "normal_decode_set_metadata"
    problem = load(os.path.join(directory, f"{name}.py"), "variant_problem")
    seed_text = open(os.path.join(directory, f"{name}.seed.py")).read()
    assert SERIAL in seed_text
    variants = [("seed", seed_text)] + [
        (f"prefix sum {block} requests at a time", seed_text.replace(SERIAL, BLOCKED.format(block=block)))
        for block in (256, 1024)
    ]
    modules = [(label, from_text(text, f"variant_{i}")) for i, (label, text) in enumerate(variants)]
    init = problem.get_init_inputs()
    for batch, context in ((256, 8192), (512, 8192), (64, 8192), (16, 1000), (1, 8192), (256, 1024)):
        torch.manual_seed(0)
        inputs = [
            x.cuda()
            for x in problem.make_inputs(
                batch_size=batch,
                pool_size=max(2 * batch, 8),
                max_context_len=context,
                page_size=problem.page_size,
                seq_len_delta=problem.seq_len_delta,
            )
        ]
        base = None
        for label, module in modules:
            model = module.ModelNew(*init[:2], context)
            with torch.no_grad():
                out = model(*inputs)
                same = base is None or all(torch.equal(a, b) for a, b in zip(out, base))
                base = out if base is None else base
                ms = min(
                    triton.testing.do_bench_cudagraph(lambda m=model, x=inputs: m(*x), rep=200)
                    for _ in range(3)
                )
            if label == "seed":
                seed_ms = ms
            print(
                f"batch {batch:4d} context {context:5d}  {label:<34} {ms * 1000:8.2f} us  equal={same}"
                f"  vs seed {seed_ms / ms:.3f}x",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".carry/upstream/work")
