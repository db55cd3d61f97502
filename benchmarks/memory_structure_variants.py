"""Hand-made variants of Inductor's seeds for three KernelBench level-1 problems (38_L1Norm_, 40_LayerNorm,
91_cumsum_reverse), each checked against the problem's Model and timed with triton.testing.do_bench beside
torch.compile: the exploration that docs/benchmarks.md section 6f starts from (a later pass over the row run
backwards, more warps, the flip folded into the scan's store). Not a bench of the evolved kernels.

    KERNELBENCH=~/KernelBench/KernelBench SEEDS=seeds python benchmarks/memory_structure_variants.py l1 ln cs

SEEDS holds `ksmith seed KERNELBENCH/level1/NAME.py --from inductor -o SEEDS/NAME.py --device cuda` for
the three problems.
"""

import importlib.util
import os
import sys
import tempfile

import torch
import triton

K = os.path.join(os.environ.get("KERNELBENCH", ".carry/kernelbench"), "level1")
S = os.environ.get("SEEDS", ".carry/kbseeds")


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def from_text(text, name):
    d = tempfile.mkdtemp()
    p = os.path.join(d, name + ".py")
    open(p, "w").write(text)
    return load(p, name)


REV = """    for r0_rev in tl.range(0, r0_numel, R0_BLOCK):
        r0_offset = ((r0_numel - 1) // R0_BLOCK) * R0_BLOCK - r0_rev
"""


def reverse_second(text):
    i = text.index("for r0_offset in tl.range(0, r0_numel, R0_BLOCK):")
    j = text.index("for r0_offset in tl.range(0, r0_numel, R0_BLOCK):", i + 10)
    line_start = text.rfind("\n", 0, j) + 1
    line_end = text.index("\n", j) + 1
    return text[:line_start] + REV + text[line_end:]


def run(prob, seedname, variants):
    ref_mod = load(f"{K}/{prob}.py", prob)
    torch.manual_seed(0)
    init = ref_mod.get_init_inputs()
    model = ref_mod.Model(*init).cuda()
    inputs = [x.cuda() for x in ref_mod.get_inputs()]
    with torch.no_grad():
        want = model(*inputs)
        cm = torch.compile(model)
        t = triton.testing.do_bench(lambda: cm(*inputs), warmup=100, rep=1000)
        print(f"{prob} compile {t:.4f} ms", flush=True)
        base = open(f"{S}/{seedname}.py").read()
        for label, fn in variants:
            text = fn(base)
            m = from_text(text, seedname + "_v")
            new = m.ModelNew(*init).cuda()
            new.load_state_dict(model.state_dict())
            got = new(*inputs)
            ok = torch.allclose(got, want, atol=1e-4, rtol=1e-4)
            ts = [
                triton.testing.do_bench(lambda new=new: new(*inputs), warmup=100, rep=1000) for _ in range(2)
            ]
            print(
                f"{prob} {label}: {min(ts):.4f} ms ({ts[0]:.4f}/{ts[1]:.4f}) ok={ok} vs compile {t / min(ts):.3f}x",
                flush=True,
            )
    torch.cuda.empty_cache()


def sub(a, b):
    return lambda t: t.replace(a, b)


def chain(*fs):
    def f(t):
        for g in fs:
            t = g(t)
        return t

    return f


L1 = "XBLOCK=1, R0_BLOCK=2048, num_warps=16, num_stages=1"
which = sys.argv[1:] or ["l1", "ln"]
if "l1" in which:
    run(
        "38_L1Norm_",
        "38_L1Norm_",
        [
            ("seed", lambda t: t),
            ("reverse", reverse_second),
            (
                "reverse R4096",
                chain(reverse_second, sub(L1, "XBLOCK=1, R0_BLOCK=4096, num_warps=16, num_stages=1")),
            ),
            (
                "reverse R1024 w8",
                chain(reverse_second, sub(L1, "XBLOCK=1, R0_BLOCK=1024, num_warps=8, num_stages=1")),
            ),
            (
                "reverse w8",
                chain(reverse_second, sub(L1, "XBLOCK=1, R0_BLOCK=2048, num_warps=8, num_stages=1")),
            ),
            (
                "reverse w32",
                chain(reverse_second, sub(L1, "XBLOCK=1, R0_BLOCK=2048, num_warps=32, num_stages=1")),
            ),
            ("R4096", sub(L1, "XBLOCK=1, R0_BLOCK=4096, num_warps=16, num_stages=1")),
        ],
    )
if "ln" in which:
    P = "XBLOCK=512, num_warps=8, num_stages=1"
    run(
        "40_LayerNorm",
        "40_LayerNorm",
        [
            ("seed", lambda t: t),
            ("pw X1024 w4", sub(P, "XBLOCK=1024, num_warps=4, num_stages=1")),
            ("pw X1024 w8", sub(P, "XBLOCK=1024, num_warps=8, num_stages=1")),
            ("pw X2048 w8", sub(P, "XBLOCK=2048, num_warps=8, num_stages=1")),
            ("pw X4096 w8", sub(P, "XBLOCK=4096, num_warps=8, num_stages=1")),
            ("pw X2048 w16", sub(P, "XBLOCK=2048, num_warps=16, num_stages=1")),
            (
                "pw no evict_last",
                lambda t: t.replace("x1), None, eviction_policy='evict_last')", "x1), None)"),
            ),
        ],
    )
if "cs" in which:

    def fuse_flip(t):
        t = t.replace(
            "tl.store(out_ptr0 + (r0_1 + 32768*x0), tmp8, r0_mask)",
            "tl.store(out_ptr0 + (32767 + ((-1)*r0_1) + 32768*x0), tmp8, r0_mask)",
        )
        i = t.index("        buf1 = torch.empty_strided")
        return t[:i] + "        return buf0\n"

    C = "XBLOCK=1, R0_BLOCK=2048, num_warps=16, num_stages=1"
    run(
        "91_cumsum_reverse",
        "91_cumsum_reverse",
        [
            ("seed", lambda t: t),
            ("fused flip", fuse_flip),
            (
                "fused flip R4096",
                chain(fuse_flip, sub(C, "XBLOCK=1, R0_BLOCK=4096, num_warps=16, num_stages=1")),
            ),
            (
                "fused flip R1024 w8",
                chain(fuse_flip, sub(C, "XBLOCK=1, R0_BLOCK=1024, num_warps=8, num_stages=1")),
            ),
            (
                "fused flip X2 R2048",
                chain(fuse_flip, sub(C, "XBLOCK=2, R0_BLOCK=2048, num_warps=16, num_stages=1")),
            ),
        ],
    )
