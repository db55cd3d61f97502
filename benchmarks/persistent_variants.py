"""Write the suite's GEMM seeds with TMA loads at a large tile, with and without the ``persistent`` edit, so that
``ksmith eval`` can judge each pair under ksmith's own protocol (docs/benchmarks.md §5c).

For every problem named and every tile of ``--tiles`` (eight warps, at the stages named):
``<problem>.tma.<config>.py`` (the ``tma_loads`` edit at that tile) and
``<problem>.persistent<P>.<config>.py`` (the same, made persistent at P = 1 and 2 programs per SM, and at the
number the edit picks for that tile); for a batched GEMM also ``<problem>.batchorder<P>.<config>.py`` (the
persistent form that loops over every batch's tiles in batch order). Prints one line per file, marking the edit's own choice.

    python benchmarks/persistent_variants.py --out variants matmul bmm matmul_bias_relu matmul_gelu
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MATMUL = HERE.parent / "plugins" / "ksmith_problems" / "problems" / "matmul"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--tiles",
        default="128x128x64:3,128x256x64:3:4",
        help="BLOCK_MxBLOCK_NxBLOCK_K:stages[:stages] of the TMA configurations to write",
    )
    parser.add_argument("problems", nargs="+")
    args = parser.parse_args()

    import libcst as cst

    from ksmith_mutate.edits import possible_edits
    from ksmith_mutate.gemm_configs import tile_names
    from ksmith_mutate.source_model import parse, with_keyword

    tiles = []
    for item in args.tiles.split(","):
        shape, *stages = item.split(":")
        tiles += [(tuple(int(x) for x in shape.split("x")), int(n)) for n in stages]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.problems:
        seed = (MATMUL / f"{name}.seed.py").read_text(encoding="utf-8")
        model = parse(seed)
        (site,) = [s for s in model.launches if model.kernel_for(s).uses_dot]
        names = tile_names(site.literal_ints())
        for (block_m, block_n, block_k), stages in tiles:
            call = site.call
            for key, value in (
                (names["M"], block_m),
                (names["N"], block_n),
                (names["K"], block_k),
                ("num_warps", 8),
                ("num_stages", stages),
            ):
                call = with_keyword(call, key, cst.Integer(str(value)))
            source = model.module.deep_replace(site.call, call).code
            tma = possible_edits(source, ("tma_loads",))[0]  # at the tile set above
            forms = {"tma": tma.source}
            chosen = set()
            for edit in possible_edits(tma.source, ("persistent",)):
                if edit.description.startswith("persistent programs per SM"):
                    continue  # a step of an already persistent kernel
                # A batched GEMM is offered twice: tiles on axis 0 with the batch axis kept ("persistent"),
                # and batch and tiles on one axis in batch order ("batchorder").
                batch_order = edit.detail.get("batch_order", False)
                form, helper = (
                    ("batchorder", "_persistent_batch_grid")
                    if batch_order
                    else ("persistent", "_persistent_grid")
                )
                estimate = edit.detail["per_sm"]
                chosen.add(f"{form}{estimate}")
                for per_sm in sorted({1, 2, estimate}):
                    forms[f"{form}{per_sm}"] = edit.source.replace(
                        f"{helper}(grid, {estimate})", f"{helper}(grid, {per_sm})"
                    )
            label = f"{block_m}x{block_n}x{block_k}_8w_{stages}s"
            for form, text in forms.items():
                path = out / f"{name}.{form}.{label}.py"
                path.write_text(text, encoding="utf-8")
                print(path, "(the edit's own programs per SM)" if form in chosen else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
