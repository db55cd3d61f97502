"""How each supported launcher is driven: its inputs, its call, its sizes and what a patch may assume.

Finding and extracting a kernel is generic (:mod:`ksmith_upstream.extract`); building meaningful inputs is not:
page tables need valid row indices, routers need probabilities. A recipe says, for one launcher:

- ``make_inputs``: a function of the sizes that returns the problem's input tensors (CPU, no ``device``);
- ``call``: a function ``call(launcher, *inputs, **config)`` that allocates outputs, launches and returns them;
- ``sizes``: the full sizes, from a representative model (``--shapes`` overrides them), and ``small``: the CPU
  sizes the Triton interpreter runs in about a second;
- ``config``: the sizes passed to the model's constructor (scalars of the call, not tensors);
- ``applies``: the conditions, over the launcher's parameters, that the problem exercises. A patch sends only
  those calls to the evolved kernel and leaves every other call on upstream's original path;
- ``cases``: the edge-case sweep the generated upstream test runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ksmith_upstream.source import UpstreamError


@dataclass(frozen=True)
class Recipe:
    project: str
    launcher: str
    model: str  # where the full sizes come from
    sizes: dict[str, int | float]
    small: dict[str, int | float]
    config: tuple[str, ...]
    make_inputs: str
    call: str
    applies: tuple[str, ...]  # Python expressions over the launcher's parameters and ``sizes``
    cases: tuple[dict[str, int | float], ...]
    tolerances: dict[str, list[float]] = field(default_factory=dict)
    # The size a patch may gate the fast path on (``--gate-from``), and how the launcher's arguments show it.
    gate: tuple[str, str] | None = None

    def inputs_signature(self) -> list[str]:
        return [k for k in self.sizes if k not in self.config]


NORMAL_DECODE_SET_METADATA = Recipe(
    project="sglang",
    launcher="normal_decode_set_metadata",
    model=(
        "FlashAttention-backend decode of a Llama-3.1-8B-class server: 256 running requests, 8192-token context, "
        "page size 1 (FA3's default), no sliding window"
    ),
    sizes={
        "batch_size": 256,
        "pool_size": 512,
        "max_context_len": 8192,
        "page_size": 1,
        "seq_len_delta": 0,
    },
    # 16 rows: the table is zero past each row's live length, and with a handful of rows a run of short draws
    # left 70 % of it zero now and then, which the evaluator rightly calls a degenerate reference.
    small={"batch_size": 16, "pool_size": 32, "max_context_len": 300},
    config=("page_size", "seq_len_delta", "max_context_len"),
    make_inputs='''
def make_inputs(batch_size, pool_size, max_context_len, page_size, seq_len_delta):
    """Sequence lengths, the token-slot table and the requests' rows in it."""
    seq_lens = torch.randint(1, max_context_len - seq_len_delta + 1, (batch_size,), dtype=torch.int64)
    req_to_token = torch.randint(0, pool_size * max_context_len, (pool_size, max_context_len), dtype=torch.int32)
    req_pool_indices = torch.randperm(pool_size)[:batch_size].to(torch.int64)
    return [seq_lens, req_to_token, req_pool_indices]
''',
    call='''
def call(launcher, seq_lens, req_to_token, req_pool_indices, page_size, seq_len_delta, max_context_len):
    """Lengths, their prefix sum and the page table, freshly allocated.

    The kernel writes every length and prefix sum, but only the live prefix of each page-table row: the table
    starts zeroed so that its tail compares equal (one memset, timed with the kernel on both sides).
    """
    batch_size = seq_lens.shape[0]
    max_seq_pages = (max_context_len + page_size - 1) // page_size
    cache_seqlens_int32 = torch.empty(batch_size, dtype=torch.int32, device=seq_lens.device)
    cu_seqlens_k = torch.empty(batch_size + 1, dtype=torch.int32, device=seq_lens.device)
    page_table = torch.zeros(batch_size, max_seq_pages, dtype=torch.int32, device=seq_lens.device)
    launcher(
        cache_seqlens_int32,
        cu_seqlens_k,
        page_table,
        req_to_token,
        req_pool_indices,
        max_seq_pages,
        seq_lens,
        seq_len_delta,
        page_size,
    )
    return cache_seqlens_int32, cu_seqlens_k, page_table
''',
    applies=(
        "page_size == {page_size}",
        "seq_len_delta == {seq_len_delta}",
        "swa_page_table is None",
        "full_to_swa_index_mapping is None",
        "full_v2p is None",
        "swa_v2p is None",
        "not skip_page_table",
        "not zero_tail",
        "req_to_token.dtype == torch.int32",
        "seq_lens.dtype == torch.int64",
    ),
    cases=(
        {"batch_size": 1, "pool_size": 2, "max_context_len": 1},
        {"batch_size": 1, "pool_size": 4, "max_context_len": 257},
        {"batch_size": 3, "pool_size": 5, "max_context_len": 128},
        {"batch_size": 7, "pool_size": 16, "max_context_len": 1000},
        {"batch_size": 64, "pool_size": 128, "max_context_len": 4096},
    ),
    gate=("batch_size", "seq_lens.shape[0]"),
)

FUSED_SINGLE_GROUP_TOPK_ROUTER = Recipe(
    project="lmdeploy",
    launcher="fused_single_group_topk_router",
    model=(
        "the single-group sigmoid router the launcher is written for (192 routed experts, top-8, renormalised, "
        "routed scaling 2.5) on a prefill chunk of 8192 tokens"
    ),
    sizes={"num_tokens": 8192, "num_experts": 192, "top_k": 8, "routed_scaling_factor": 2.5},
    small={"num_tokens": 4},
    config=("num_experts", "top_k", "routed_scaling_factor"),
    make_inputs='''
def make_inputs(num_tokens, num_experts, top_k, routed_scaling_factor):
    """Sigmoid scores in (0, 1) and a small correction bias, as the router computes them."""
    scores = torch.rand(num_tokens, num_experts, dtype=torch.float32)
    bias = torch.randn(num_experts, dtype=torch.float32) * 0.1
    return [scores, bias]
''',
    call='''
def call(launcher, scores, bias, num_experts, top_k, routed_scaling_factor):
    """Top-k weights and expert ids of every token."""
    return launcher(
        scores, bias, num_experts=num_experts, top_k=top_k, routed_scaling_factor=routed_scaling_factor
    )
''',
    applies=(
        "num_experts == {num_experts}",
        "top_k == {top_k}",
        "scores.dtype == torch.float32",
        "bias.dtype == torch.float32",
    ),
    cases=(
        {"num_tokens": 1},
        {"num_tokens": 2},
        {"num_tokens": 17},
        {"num_tokens": 128},
        {"num_tokens": 4096},
    ),
    tolerances={"float32": [1e-6, 1e-5]},
    gate=("num_tokens", "scores.shape[0]"),
)

MERGE_STATE_TRITON = Recipe(
    project="sglang",
    launcher="merge_state_triton",
    model=(
        "merging a prefix and a suffix attention state in chunked prefill of a Llama-3.1-8B-class model: "
        "8192 tokens, 32 query heads of 128, bf16 values, fp32 log-sum-exps"
    ),
    sizes={"num_tokens": 8192, "num_heads": 32, "head_size": 128},
    small={"num_tokens": 6, "num_heads": 3},
    config=(),
    make_inputs='''
def make_inputs(num_tokens, num_heads, head_size):
    """Two partial attention outputs (bf16) and their log-sum-exps (fp32), one of them +inf in places."""
    prefix_output = torch.randn(num_tokens, num_heads, head_size, dtype=torch.bfloat16)
    suffix_output = torch.randn(num_tokens, num_heads, head_size, dtype=torch.bfloat16)
    prefix_lse = torch.randn(num_tokens, num_heads, dtype=torch.float32) * 4
    suffix_lse = torch.randn(num_tokens, num_heads, dtype=torch.float32) * 4
    prefix_lse[::5, 0] = float("inf")  # an empty prefix: the kernel treats +inf as -inf
    return [prefix_output, prefix_lse, suffix_output, suffix_lse]
''',
    call='''
def call(launcher, prefix_output, prefix_lse, suffix_output, suffix_lse):
    """The merged output and log-sum-exp."""
    return launcher(prefix_output, prefix_lse, suffix_output, suffix_lse)
''',
    applies=(
        "prefix_output.dtype == torch.bfloat16",
        "suffix_output.dtype == torch.bfloat16",
        "prefix_lse.dtype == torch.float32",
        "suffix_lse.dtype == torch.float32",
        "prefix_output.shape[-1] == {head_size}",
        "prefix_output.is_contiguous() and suffix_output.is_contiguous()",
        "output is None and output_lse is None",
    ),
    cases=(
        {"num_tokens": 1, "num_heads": 1},
        {"num_tokens": 3, "num_heads": 5},
        {"num_tokens": 257, "num_heads": 8},
    ),
    tolerances={"bfloat16": [1e-2, 1e-2], "float32": [1e-5, 1e-5]},
    gate=("num_tokens", "prefix_output.shape[0]"),
)

RECIPES = {
    (r.project, r.launcher): r
    for r in (NORMAL_DECODE_SET_METADATA, FUSED_SINGLE_GROUP_TOPK_ROUTER, MERGE_STATE_TRITON)
}


def recipe_for(project: str, launcher: str) -> Recipe:
    recipe = RECIPES.get((project, launcher))
    if recipe is None:
        known = ", ".join(sorted(name for proj, name in RECIPES if proj == project))
        raise UpstreamError(
            f"{launcher} was found but ksmith has no input recipe for it yet (known: {known})"
        )
    return recipe


def with_shapes(recipe: Recipe, shapes: dict) -> tuple[dict, dict]:
    """The full and small sizes once ``--shapes`` (``{"sizes": {...}, "small": {...}}`` or flat sizes) applies."""
    if not isinstance(shapes, dict):
        raise UpstreamError("--shapes must hold a JSON object of sizes")
    full_over = shapes.get("sizes", {k: v for k, v in shapes.items() if k != "small"})
    small_over = shapes.get("small", {})
    sizes, small = dict(recipe.sizes), dict(recipe.small)
    for over in (full_over, small_over):
        unknown = sorted(set(over) - set(recipe.sizes)) if isinstance(over, dict) else ["?"]
        if unknown:
            raise UpstreamError(
                f"--shapes names unknown sizes {unknown}; {recipe.launcher} takes {list(recipe.sizes)}"
            )
        for key, value in over.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise UpstreamError(f"--shapes: {key} must be a number, not {value!r}")
    sizes.update(full_over)
    small.update(small_over)
    return sizes, small
