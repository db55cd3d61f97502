#!/usr/bin/env bash
# KernelBench's memory-bound problems where torch.compile itself runs below 0.6 of the memory roofline,
# evolved with the mutate proposer from Inductor seeds (docs/benchmarks.md section 6f). How they were chosen:
# in section 6c's rows of all 200 level-1/2 problems (benchmarks/results/h100-2026-11-24/kernelbench-full/
# rows.jsonl), every problem with compile_roofline_fraction < 0.6 whose roofline is the memory one, that is
# every such problem without a matmul or convolution (those are compute-bound, and their rows were taken before
# the roofline counted FLOPs): 38_L1Norm_, 39_L2Norm_, 40_LayerNorm, 42_Max_Pooling_2D, 43_Max_Pooling_3D and
# 91_cumsum_reverse. Resumable: run it again with the same WORK to go on after a device call's time limit.
#
#   KERNELBENCH=~/KernelBench/KernelBench BUDGET=16 bash benchmarks/memory_structure.sh
#   PROBLEMS=level1/91_cumsum_reverse WORK=ms-cumsum bash benchmarks/memory_structure.sh   # a subset
#
# KERNELBENCH: a directory holding KernelBench's level1/ (not shipped with ksmith). Where dependency wheels
# were carried in .whl/ (a machine without network), they are installed first.
set -u
cd "$(dirname "$0")/.."
. benchmarks/device_setup.sh
WORK=${WORK:-$PWD/memory_structure_out}
mkdir -p "$WORK"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c 'import torch, triton; print(torch.__version__, triton.__version__)'; date -u; } >> "$WORK/env.txt"
python benchmarks/kernelbench_levels.py evolve --kernelbench "${KERNELBENCH:-.carry/kernelbench}" \
  --out "$WORK" --budget "${BUDGET:-16}" --parallel "${PARALLEL:-2}" --deadline-s "${DEADLINE:-500}" \
  --problems ${PROBLEMS:-level1/91_cumsum_reverse level1/38_L1Norm_ level1/40_LayerNorm level1/39_L2Norm_
  level1/42_Max_Pooling_2D level1/43_Max_Pooling_3D}
