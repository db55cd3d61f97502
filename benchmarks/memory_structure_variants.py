"""Hand-made variants of Inductor's seeds for four KernelBench level-1 problems (38_L1Norm_, 40_LayerNorm,
91_cumsum_reverse, 42_Max_Pooling_2D), each checked against the problem's Model and timed with
triton.testing.do_bench beside torch.compile: the exploration that docs/benchmarks.md section 6f starts from (a
later pass over the row run backwards, more warps, the flip folded into the scan's store, the rows of one block
side by side, 2-D tiles). Not a bench of the evolved kernels.

    KERNELBENCH=~/KernelBench/KernelBench SEEDS=seeds python benchmarks/memory_structure_variants.py l1 ln cs mp

SEEDS holds `ksmith seed KERNELBENCH/level1/NAME.py --from inductor -o SEEDS/NAME.py --device cuda` for
the four problems.
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


# LayerNorm's pointwise kernel reads weight and bias (16.7 MB each) once per row: with programs in flat order
# every row sweeps them again after the other rows' x has pushed them out of L2.
POI = "def triton_poi_fused_native_layer_norm_2("
PID = "    xoffset = tl.program_id(0) * XBLOCK\n"


def rows_together(rows):
    """Program p works on row p % rows of column block p // rows: the rows of one block run side by side."""

    def f(t):
        i = t.index(POI)
        j = t.index(PID, i)
        remap = (
            "    xpid = tl.program_id(0)\n"
            f"    xpid = (xpid % {rows}) * (4194304 // XBLOCK) + (xpid // {rows}) % (4194304 // XBLOCK)"
            f" + (xpid // ({rows} * (4194304 // XBLOCK))) * {rows} * (4194304 // XBLOCK)\n"
            "    xoffset = xpid * XBLOCK\n"
        )
        return t[:j] + remap + t[j + len(PID) :]

    return f


ROWS_LOOP = """def triton_poi_fused_native_layer_norm_2(in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    x0 = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tmp10 = tl.load(in_ptr3 + (x0), None)
    tmp12 = tl.load(in_ptr4 + (x0), None)
    for x1 in range(16):
        x2 = x0 + 4194304 * x1
        tmp0 = tl.load(in_ptr0 + (x2), None)
        tmp1 = tl.load(in_ptr1 + (x1))
        tmp3 = tl.load(in_ptr2 + (x1))
        tmp2 = tmp0 - tmp1
        tmp5 = (tmp3 / 4194304.0)
        tmp8 = libdevice.rsqrt(tmp5 + 1e-05)
        tl.store(out_ptr0 + (x2), tmp2 * tmp8 * tmp10 + tmp12, None)


"""


def rows_loop(t):
    """One program per column block, looping over the 16 rows: weight and bias are read once."""
    i = t.index(POI)
    j = t.index("class ModelNew", i)
    t = t[:i] + ROWS_LOOP + t[j:]
    return t.replace(
        'grid = lambda meta: (triton.cdiv(67108864, meta["XBLOCK"]),)',
        'grid = lambda meta: (triton.cdiv(4194304, meta["XBLOCK"]),)',
    )


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
            ("pw rows of one column block together", rows_together(16)),
            (
                "pw rows together X1024 w4",
                chain(rows_together(16), sub(P, "XBLOCK=1024, num_warps=4, num_stages=1")),
            ),
            (
                "pw rows together X2048 w8",
                chain(rows_together(16), sub(P, "XBLOCK=2048, num_warps=8, num_stages=1")),
            ),
            ("pw rows together groups of 4", rows_together(4)),
            ("pw weight loaded once, loop over rows", rows_loop),
            (
                "pw loop over rows X1024 w4",
                chain(rows_loop, sub("XBLOCK=512, num_warps=8", "XBLOCK=1024, num_warps=4")),
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
if "mp" in which:
    # Max-pool 2D's kernel decodes a flat index over rows of 511 (``// 511``, ``% 511``, ``// 261121``) for every
    # element, and its 16 window masks with it. A 2-D tile of YBLOCK output rows by 512 columns decodes each
    # row once ([YBLOCK, 1]) and each column once ([1, 512]); the masks broadcast.
    FLAT = """def triton_poi_fused_max_pool2d_with_indices_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 534775808
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x1 = ((xindex // 511) % 511)
    x0 = (xindex % 511)
    x2 = xindex // 261121
    x4 = xindex
"""
    TILE = """def triton_poi_fused_max_pool2d_with_indices_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr, YBLOCK : tl.constexpr):
    yoffset = tl.program_id(0) * YBLOCK
    yindex = yoffset + tl.arange(0, YBLOCK)[:, None]
    x0 = tl.arange(0, 512)[None, :]
    xmask = (yindex < 1046528) & (x0 < 511)
    x1 = yindex % 511
    x2 = yindex // 511
    x4 = yindex * 511 + x0
"""
    LAUNCH = "XBLOCK=1024, num_warps=4, num_stages=1)"

    def tile(rows, warps):
        def f(t):
            assert FLAT in t
            t = t.replace(FLAT, TILE)
            t = t.replace(
                'grid = lambda meta: (triton.cdiv(534775808, meta["XBLOCK"]),)',
                'grid = lambda meta: (triton.cdiv(1046528, meta["YBLOCK"]),)',
            )
            return t.replace(LAUNCH, f"XBLOCK=1024, YBLOCK={rows}, num_warps={warps}, num_stages=1)")

        return f

    run(
        "42_Max_Pooling_2D",
        "42_Max_Pooling_2D",
        [
            ("seed", lambda t: t),
            ("seed 8 warps", sub(LAUNCH, "XBLOCK=1024, num_warps=8, num_stages=1)")),
            ("tile 2x512 w4", tile(2, 4)),
            ("tile 4x512 w4", tile(4, 4)),
            ("tile 4x512 w8", tile(4, 8)),
            ("tile 8x512 w8", tile(8, 8)),
            ("tile 16x512 w8", tile(16, 8)),
            ("tile 16x512 w16", tile(16, 16)),
        ],
    )
