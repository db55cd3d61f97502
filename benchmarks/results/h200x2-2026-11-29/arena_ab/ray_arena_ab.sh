#!/bin/bash
# Issue 17 (docs/benchmarks.md §8i): the trials' output copies as views of one shared buffer (`OutputArena`),
# against a copy of its own per output (KSMITH_OUTPUT_ARENA=0), on one two-GPU machine: `ray1` and `ray2` of
# ray_scaling.py with each. Every process inherits the variable (the driver puts it in each job).
# Usage: bash benchmarks/ray_arena_ab.sh [STEP...] (default: tests arena no_arena). `tests` runs the GPU
# tests of the transport and protocol (about four minutes); each ray step about four and a half. A step whose
# output is already in $OUT/arena_ab/ is skipped, so a cut-short call resumes (copy the earlier call's folder
# back into $OUT first); run `tests` and one ray step per call.
set -u
. benchmarks/device_setup.sh
if [ -f .ray/ray.tar.xz ]; then  # Ray carried as an archive and wheels (see the device README)
  mkdir -p /tmp/site && tar xJf .ray/ray.tar.xz -C /tmp/site && pip install -q --no-deps --target /tmp/site .ray/*.whl
  export PYTHONPATH=/tmp/site
fi
dir="$OUT/arena_ab"
mkdir -p "$dir"
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv > "$dir/gpu.txt"
for step in ${*:-tests arena no_arena}; do
  case $step in
    tests)
      [ -f "$dir/gpu_tests.log" ] && { echo "tests: done before"; continue; }
      python -m pytest -q -m gpu tests/triton/test_output_arena.py tests/triton/test_transport_and_pool.py tests/triton/test_protocol.py \
        tests/triton/test_large_outputs.py > "$dir/gpu_tests.log" 2>&1
      tail -2 "$dir/gpu_tests.log" ;;
    arena|no_arena)
      [ -f "$dir/$step.json" ] && { echo "$step: done before"; continue; }
      flag=1; [ "$step" = no_arena ] && flag=0
      KSMITH_OUTPUT_ARENA=$flag python benchmarks/ray_scaling.py --out "$dir/$step.json" --slots 8 \
        --configs ray1 ray2 > "$dir/$step.log" 2>&1
      grep -o "ray[12]: [0-9.]*/min\|trial steps ms {[^}]*}" "$dir/$step.log"; grep -v logging.cc "$dir/$step.log" | tail -4 ;;
    *) echo "unknown step: $step (tests, arena, no_arena)"; exit 2 ;;
  esac
done
