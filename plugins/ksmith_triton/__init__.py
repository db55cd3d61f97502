"""ksmith built-in plugin: the Triton / NVIDIA evaluation backend.

Every candidate runs in a killable child process (``python -m ksmith_triton.worker candidate``, whose code is
``candidate_side.py``); reference outputs come from a separate reference process the candidate never reaches
(``python -m ksmith_triton.worker reference``, code in ``reference_side.py``), which also compares the
candidate's outputs with them. The two sides share only ``child_common.py``. See ``evaluator.py`` for the
protocol, ``guards.py`` for the anti-hacking checks made inside the candidate's process, ``locks.py`` for the
per-GPU lock (exclusive while timing, shared for other GPU work), ``admission.py`` for the per-GPU memory gate.
"""

# Bump when anything that changes measured numbers or verdicts changes: it is part of every cache key.
# 4: torch.compile references autotune with ksmith's timing loop (inductor_tuning.py)
# 5: fp32 convolutions without TF32 in the reference and the candidate (child_common.fp32_means_fp32)
# 6: the roofline counts FLOPs (torch's counter) and parameter bytes, with a FLOP/s ceiling by compute dtype
# 7: fused attention's FLOPs priced by ksmith (a causal mask computes about half of the scores)
# 8: a timed call's sample positions drawn only after the loop waited for its kernels (a kernel still running
#    could read positions the host had written; docs/evaluation.md, "Every timed call is checked")
# 9: a TIMING_BIMODAL block also 2 us below its set's median (BIMODAL_FLOOR_MS), and the timing's memory
#    reserved before the exclusive hold (candidate_side.reserve_for_timing; docs/benchmarks.md §8g)
PROTOCOL_VERSION = 9
