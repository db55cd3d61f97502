"""Structures for the suite's online softmax (1024 rows of 32768 fp32), timed beside torch.compile before any of
them becomes an edit: where the seed's 0.6 of the memory roofline goes, and which structure reaches past
Inductor's.

- ``two_pass``: the seed's structure (a pass for the running max and sum, a pass writing the output), at several
  blocks and warps, its second pass run backwards (``loop_reverse``), eviction hints (the first pass's loads
  kept in L2, the second's evicted first), and a persistent grid (``NPROG`` programs walking the rows);
- ``split_rows``: each row split over ``S`` programs, two launches (partial maxima and sums, then the output):
  the two-stage form, reading the row twice;
- ``coop_rows``: each row split over ``S`` programs that each hold their slice in registers, publish its
  maximum and sum, wait (a spin on a per-row counter) for the row's other slices, and write: the row is read
  once. Its wait needs every slice of a row resident at once, which holds where programs start in order;
- ``coop_lanes``: what the ``split_row`` edit writes for the seed (per-lane running values, two meetings),
  with the ticket numbering and the second load of the slice switchable (``ONLY_COOP=1``);
- torch.compile's kernel, whose source is written to OUT/inductor_online_softmax.py.

Each variant is checked against ``torch.softmax`` and timed with ``triton.testing.do_bench`` (median, L2
flushed) twice; the table gives the lower median and the fraction of the memory roofline (one read and one
write of the matrix at the GPU's nominal bandwidth).

    python benchmarks/online_softmax_variants.py [--out OUT] [--quick]
    ONLY_COOP=1 python benchmarks/online_softmax_variants.py   # the split_row edit's parts, one at a time
    EDITED=1 python benchmarks/online_softmax_variants.py      # the edit's own output

Exploration, not a ksmith result: numbers it prints go into docs only with this command named.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl

ROWS, COLS = 1024, 32768
NOMINAL_TBPS = {"H100": 3.35, "H200": 4.8}


@triton.jit
def two_pass(
    x_ptr,
    out_ptr,
    n_rows,
    n_cols,
    stride,
    BLOCK: tl.constexpr,
    NPROG: tl.constexpr,
    REVERSE: tl.constexpr,
    HINTS: tl.constexpr,
):
    for row in range(tl.program_id(0), n_rows, NPROG):
        base = tl.cast(row, tl.int64) * stride
        running_max = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
        running_sum = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            if HINTS:
                x = tl.load(
                    x_ptr + base + cols, mask=cols < n_cols, other=float("-inf"), eviction_policy="evict_last"
                )
            else:
                x = tl.load(x_ptr + base + cols, mask=cols < n_cols, other=float("-inf"))
            new_max = tl.maximum(running_max, x)
            scale = tl.where(new_max == float("-inf"), 0.0, tl.exp(running_max - new_max))
            running_sum = running_sum * scale + tl.where(new_max == float("-inf"), 0.0, tl.exp(x - new_max))
            running_max = new_max
        row_max = tl.max(running_max, axis=0)
        lane_scale = tl.where(running_max == float("-inf"), 0.0, tl.exp(running_max - row_max))
        row_sum = tl.sum(running_sum * lane_scale, axis=0)
        for i in range(0, n_cols, BLOCK):
            if REVERSE:
                start = ((n_cols - 1) // BLOCK) * BLOCK - i
            else:
                start = i
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n_cols
            if HINTS:
                x = tl.load(
                    x_ptr + base + cols, mask=mask, other=float("-inf"), eviction_policy="evict_first"
                )
            else:
                x = tl.load(x_ptr + base + cols, mask=mask, other=float("-inf"))
            tl.store(out_ptr + base + cols, tl.exp(x - row_max) / row_sum, mask=mask)


@triton.jit
def _slice_stats(x_ptr, ws_max, ws_sum, n_cols, stride, S: tl.constexpr, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    part = tl.program_id(1)
    cols = part * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride + cols, mask=cols < n_cols, other=float("-inf"))
    m = tl.max(x, axis=0)
    s = tl.sum(tl.where(m == float("-inf"), 0.0, tl.exp(x - m)), axis=0)
    tl.store(ws_max + row * S + part, m)
    tl.store(ws_sum + row * S + part, s)


@triton.jit
def _slice_write(x_ptr, out_ptr, ws_max, ws_sum, n_cols, stride, S: tl.constexpr, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    part = tl.program_id(1)
    parts = tl.arange(0, S)
    ms = tl.load(ws_max + row * S + parts)
    ss = tl.load(ws_sum + row * S + parts)
    row_max = tl.max(ms, axis=0)
    total = tl.sum(tl.where(ms == float("-inf"), 0.0, ss * tl.exp(ms - row_max)), axis=0)
    cols = part * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    base = row.to(tl.int64) * stride
    x = tl.load(x_ptr + base + cols, mask=mask, other=float("-inf"))
    tl.store(out_ptr + base + cols, tl.exp(x - row_max) / total, mask=mask)


@triton.jit
def coop_rows(x_ptr, out_ptr, ws_max, ws_sum, counter, n_cols, stride, S: tl.constexpr, CHUNK: tl.constexpr):
    pid = tl.program_id(0)
    row = pid // S
    part = pid % S
    cols = part * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    base = row.to(tl.int64) * stride
    x = tl.load(x_ptr + base + cols, mask=mask, other=float("-inf"))
    m = tl.max(x, axis=0)
    s = tl.sum(tl.where(m == float("-inf"), 0.0, tl.exp(x - m)), axis=0)
    tl.store(ws_max + row * S + part, m)
    tl.store(ws_sum + row * S + part, s)
    tl.debug_barrier()
    tl.atomic_add(counter + row, 1, sem="release")
    arrived = tl.atomic_add(counter + row, 0, sem="acquire")
    while arrived < S:
        arrived = tl.atomic_add(counter + row, 0, sem="acquire")
    tl.debug_barrier()
    parts = tl.arange(0, S)
    ms = tl.load(ws_max + row * S + parts, volatile=True)
    ss = tl.load(ws_sum + row * S + parts, volatile=True)
    row_max = tl.max(ms, axis=0)
    total = tl.sum(tl.where(ms == float("-inf"), 0.0, ss * tl.exp(ms - row_max)), axis=0)
    tl.store(out_ptr + base + cols, tl.exp(x - row_max) / total, mask=mask)


@triton.jit
def coop_lanes(
    x_ptr,
    out_ptr,
    sync,
    n_cols,
    stride,
    S: tl.constexpr,
    CHUNK: tl.constexpr,
    TICKET: tl.constexpr,
    RELOAD: tl.constexpr,
):
    # What the split_row edit writes for the seed, with its parts switchable: the seed's per-lane running
    # max and sum, two meetings (the row's max, then its sum), the row from a ticket, the slice loaded again
    # for the output.
    if TICKET:
        pid = tl.atomic_add(sync, 1)
    else:
        pid = tl.program_id(0)
    row = pid // S
    part = pid % S
    rows = tl.num_programs(0) // S
    partials = (sync + 1 + rows).to(tl.pointer_type(tl.float32))
    cols = part * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    base = row.to(tl.int64) * stride
    x = tl.load(x_ptr + base + cols, mask=mask, other=float("-inf"))
    lane_max = x
    lane_sum = tl.where(x == float("-inf"), 0.0, 1.0)
    local = tl.max(lane_max, axis=0)
    tl.store(partials + (row * S + part) * 2, local)
    tl.debug_barrier()
    tl.atomic_add(sync + 1 + row, 1, sem="release")
    seen = tl.atomic_add(sync + 1 + row, 0, sem="acquire")
    while seen < S:
        seen = tl.atomic_add(sync + 1 + row, 0, sem="acquire")
    tl.debug_barrier()
    row_max = tl.max(tl.load(partials + (row * S + tl.arange(0, S)) * 2, volatile=True), axis=0)
    lane_scale = tl.where(lane_max == float("-inf"), 0.0, tl.exp(lane_max - row_max))
    local = tl.sum(lane_sum * lane_scale, axis=0)
    tl.store(partials + (row * S + part) * 2 + 1, local)
    tl.debug_barrier()
    tl.atomic_add(sync + 1 + row, 1, sem="release")
    seen = tl.atomic_add(sync + 1 + row, 0, sem="acquire")
    while seen < 2 * S:
        seen = tl.atomic_add(sync + 1 + row, 0, sem="acquire")
    tl.debug_barrier()
    total = tl.sum(tl.load(partials + (row * S + tl.arange(0, S)) * 2 + 1, volatile=True), axis=0)
    if RELOAD:
        x = tl.load(x_ptr + base + cols, mask=mask, other=float("-inf"))
    tl.store(out_ptr + base + cols, tl.exp(x - row_max) / total, mask=mask)


def variants(x, quick):
    n_rows, n_cols = x.shape
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count

    def tp(block, warps, nprog=None, reverse=False, hints=False):
        def run():
            out = torch.empty_like(x)
            grid = nprog or n_rows
            two_pass[(grid,)](
                x,
                out,
                n_rows,
                n_cols,
                x.stride(0),
                BLOCK=block,
                NPROG=grid,
                REVERSE=reverse,
                HINTS=hints,
                num_warps=warps,
            )
            return out

        return run

    def split(s, warps):
        chunk = triton.next_power_of_2(triton.cdiv(n_cols, s))

        def run():
            out = torch.empty_like(x)
            ws_max = torch.empty(n_rows * s, device=x.device, dtype=torch.float32)
            ws_sum = torch.empty_like(ws_max)
            _slice_stats[(n_rows, s)](
                x, ws_max, ws_sum, n_cols, x.stride(0), S=s, CHUNK=chunk, num_warps=warps
            )
            _slice_write[(n_rows, s)](
                x, out, ws_max, ws_sum, n_cols, x.stride(0), S=s, CHUNK=chunk, num_warps=warps
            )
            return out

        return run

    def coop(s, warps):
        chunk = triton.next_power_of_2(triton.cdiv(n_cols, s))

        def run():
            out = torch.empty_like(x)
            ws_max = torch.empty(n_rows * s, device=x.device, dtype=torch.float32)
            ws_sum = torch.empty_like(ws_max)
            counter = torch.zeros(n_rows, device=x.device, dtype=torch.int32)
            coop_rows[(n_rows * s,)](
                x, out, ws_max, ws_sum, counter, n_cols, x.stride(0), S=s, CHUNK=chunk, num_warps=warps
            )
            return out

        return run

    def lanes(s, warps, ticket, reload):
        chunk = triton.next_power_of_2(triton.cdiv(n_cols, s))

        def run():
            out = torch.empty_like(x)
            sync = torch.zeros(1 + n_rows + n_rows * s * 2, device=x.device, dtype=torch.int32)
            coop_lanes[(n_rows * s,)](
                x,
                out,
                sync,
                n_cols,
                x.stride(0),
                S=s,
                CHUNK=chunk,
                TICKET=ticket,
                RELOAD=reload,
                num_warps=warps,
            )
            return out

        return run

    if os.environ.get("EDITED"):
        yield "coop_rows S=8, 4 warps", coop(8, 4)
        yield from edited(x)
        return
    if os.environ.get("ONLY_COOP"):
        for s, warps in [(4, 8), (8, 4), (8, 8), (16, 4)]:
            yield f"coop_rows S={s}, {warps} warps", coop(s, warps)
            for ticket, reload in [(False, False), (True, False), (False, True), (True, True)]:
                what = ", ".join(w for w, on in (("ticket", ticket), ("reload", reload)) if on) or "plain"
                yield (
                    f"coop_lanes S={s}, {warps} warps, two meetings, {what}",
                    lanes(s, warps, ticket, reload),
                )
        return
    yield "seed (1024, 4 warps)", tp(1024, 4)
    for block, warps in (
        [(2048, 8), (4096, 8)] if quick else [(2048, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 16)]
    ):
        yield f"two_pass {block}, {warps} warps", tp(block, warps)
    for block, warps in [(1024, 4), (2048, 8), (4096, 8)]:
        yield f"two_pass {block}, {warps} warps, reverse", tp(block, warps, reverse=True)
        yield f"two_pass {block}, {warps} warps, reverse + hints", tp(block, warps, reverse=True, hints=True)
    for k in (1, 2) if quick else (1, 2, 4):
        for block, warps in [(2048, 8), (4096, 16)]:
            yield (
                f"two_pass persistent {k}/SM {block}, {warps} warps, reverse + hints",
                tp(block, warps, nprog=sms * k, reverse=True, hints=True),
            )
    for s, warps in [(4, 8), (8, 8), (16, 4)]:
        yield f"split_rows S={s}, {warps} warps (2 launches)", split(s, warps)
    for s, warps in [(2, 16), (4, 8), (4, 16), (8, 4), (8, 8), (16, 4)]:
        yield f"coop_rows S={s}, {warps} warps", coop(s, warps)


def edited(x):
    """The seed as the ``split_row`` edit writes it, at each split, and without the output pass's second load
    of the slice (what reusing the first pass's load would buy)."""
    import importlib.util
    import tempfile
    from pathlib import Path

    from ksmith_mutate.edits import possible_edits

    seed = (
        Path(__file__).resolve().parents[1]
        / "plugins/ksmith_problems/problems/softmax/online_softmax.seed.py"
    )
    again = '        x = tl.load(x_row + cols, mask=mask, other=float("-inf"))\n'
    for edit in possible_edits(seed.read_text(), ("split_row",)):
        assert again in edit.source
        for form, source in {
            "as written": edit.source,
            "no second load": edit.source.replace(again, "", 1),
        }.items():
            path = Path(tempfile.mkdtemp()) / "edited.py"
            path.write_text(source)
            spec = importlib.util.spec_from_file_location(f"edited_{id(path)}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            model = module.ModelNew()
            yield f"split_row S={edit.detail['split']}, {form}", lambda model=model: model(x)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="folder for the table (JSON) and Inductor's kernel source")
    ap.add_argument("--quick", action="store_true", help="fewer configurations")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("online_softmax_variants.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name()
    tbps = next((v for k, v in NOMINAL_TBPS.items() if k in name), 3.35)
    floor_ms = 2 * ROWS * COLS * 4 / (tbps * 1e12) * 1e3
    torch.manual_seed(0)
    x = torch.randn(ROWS, COLS, device="cuda")
    want = torch.softmax(x, dim=-1)

    def timed(fn):
        return min(triton.testing.do_bench(fn, warmup=50, rep=400) for _ in range(2))

    from torch._inductor.utils import run_and_get_code

    compiled = torch.compile(lambda t: torch.softmax(t, dim=-1))
    _, codes = run_and_get_code(compiled, x)
    if args.out:
        with open(f"{args.out}/inductor_online_softmax.py", "w") as f:
            f.write("\n\n".join(codes))
    rows = [{"variant": "torch.compile", "ms": timed(lambda: compiled(x)), "ok": True}]
    for label, fn in variants(x, args.quick):
        try:
            ok = bool(torch.allclose(fn(), want, atol=1e-5, rtol=1e-4))
            rows.append({"variant": label, "ms": timed(fn), "ok": ok})
        except Exception as e:  # a configuration that does not compile is a row, not a stop
            rows.append({"variant": label, "ms": None, "ok": False, "error": str(e).splitlines()[0][:120]})
        print(json.dumps(rows[-1]), flush=True)
    compile_ms = rows[0]["ms"]
    print(f"\n{name}, torch {torch.__version__}, triton {triton.__version__}; roofline {floor_ms:.4f} ms")
    print("| variant | ms | roofline | vs torch.compile | correct |")
    print("|---|---|---|---|---|")
    for r in rows:
        if r["ms"]:
            print(
                f"| {r['variant']} | {r['ms']:.4f} | {floor_ms / r['ms']:.2f} | {compile_ms / r['ms']:.3f}x | {r['ok']} |"
            )
        else:
            print(f"| {r['variant']} | - | - | - | {r.get('error')} |")
    if args.out:
        with open(f"{args.out}/online_softmax_variants.json", "w") as f:
            json.dump(
                {"gpu": name, "torch": torch.__version__, "triton": triton.__version__, "rows": rows},
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
