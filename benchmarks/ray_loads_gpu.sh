#!/bin/bash
# Issue 17's next measurement on a two-GPU machine (docs/benchmarks.md §8h): which load of a second GPU's
# evaluations slows the first GPU's, and which of the trials' steps grow with two GPUs busy.
#   1. `ray1` on GPU 0 with CUDA contexts made and destroyed on GPU 1, the load tied to the run's process;
#   2. the same with device allocations, frees and IPC handles on GPU 1;
#   3. `ray1` then `ray2`, whose rows print the trials' steps (`details.trial_steps_ms` medians);
#   3b. (§8j, not in the default) `ray1` on GPU 0 beside each of the other things a second GPU's evaluations
#      bring: `idle`, 32 processes holding a context and a block on GPU 1 (as many as one GPU's 16 spares,
#      8 workers and reference processes); `alloc8`, allocations, frees and
#      IPC handles from 8 processes there; `kernels`, 2 processes keeping GPU 1 busy with copies; and
#      `slots16`, `ray1` with 16 evaluations in flight and no load (the in-flight count of `ray2` on one GPU),
#      `slots8` its baseline (both run on a one-GPU machine);
#   4. (`eager`, not in the default) the same with CUDA_MODULE_LOADING=EAGER, which every process inherits:
#      each kernel loaded when a worker makes its context, ahead of its job, instead of on its first launch
#      inside a hold, at the price of a slower, larger context.
# Usage: bash benchmarks/ray_loads_gpu.sh [STEP...] (default: contexts alloc scaling; about nine minutes,
# `eager` about five more: run it in a second call); results under
# $OUT/ray_loads/. A step whose JSON is already in $OUT/ray_loads/ is skipped, so a cut-short call resumes
# (copy the earlier call's folder back into $OUT first).
set -u
. benchmarks/device_setup.sh
if [ -f .ray/ray.tar.xz ]; then  # Ray carried as an archive and wheels (see the device README)
  mkdir -p /tmp/site && tar xJf .ray/ray.tar.xz -C /tmp/site && pip install -q --no-deps --target /tmp/site .ray/*.whl
  export PYTHONPATH=/tmp/site
fi
dir="$OUT/ray_loads"
mkdir -p "$dir"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$dir/gpu.txt"
one_gpu_with_load() {  # NAME MODE [EXTRA...]
  local name=$1 mode=$2; shift 2
  [ -f "$dir/$name.json" ] && { echo "$name: done before"; return; }
  python benchmarks/ray_scaling.py --out "$dir/$name.json" --slots 8 --configs ray1 > "$dir/$name.log" 2>&1 &
  local bench=$!
  python benchmarks/driver_load.py --gpu 1 --mode "$mode" "$@" --while-pid "$bench" > "$dir/${name}_load.log" 2>&1
  wait "$bench"
  tail -3 "$dir/$name.log"; cat "$dir/${name}_load.log"
}
for step in ${*:-contexts alloc scaling}; do
  case $step in
    contexts) one_gpu_with_load ray1_contexts_gpu1 contexts ;;
    alloc) one_gpu_with_load ray1_alloc_gpu1 alloc --procs 2 ;;
    alloc8) one_gpu_with_load ray1_alloc8_gpu1 alloc --procs 8 ;;
    idle) one_gpu_with_load ray1_idle_gpu1 idle --procs 32 ;;
    kernels) one_gpu_with_load ray1_kernels_gpu1 kernels --procs 2 ;;
    slots8|slots16)  # one GPU, no load, 8 or 16 evaluations in flight (needs no second GPU)
      local_slots=${step#slots}
      if [ -f "$dir/ray1_$step.json" ]; then echo "$step: done before"; else
        python benchmarks/ray_scaling.py --out "$dir/ray1_$step.json" --slots "$local_slots" --configs ray1 > "$dir/ray1_$step.log" 2>&1
        grep -o "ray1: [0-9.]*/min\|trial steps ms {[^}]*}" "$dir/ray1_$step.log"; tail -3 "$dir/ray1_$step.log"
      fi ;;
    scaling)
      if [ -f "$dir/scaling.json" ]; then echo "scaling: done before"; else
        python benchmarks/ray_scaling.py --out "$dir/scaling.json" --slots 8 --configs ray1 ray2 > "$dir/scaling.log" 2>&1
        grep -o "ray[12]: [0-9.]*/min\|trial steps ms {[^}]*}" "$dir/scaling.log"; tail -4 "$dir/scaling.log"
      fi ;;
    eager)
      if [ -f "$dir/scaling_eager.json" ]; then echo "eager: done before"; else
        CUDA_MODULE_LOADING=EAGER python benchmarks/ray_scaling.py --out "$dir/scaling_eager.json" --slots 8 \
          --configs ray1 ray2 > "$dir/scaling_eager.log" 2>&1
        grep -o "ray[12]: [0-9.]*/min\|trial steps ms {[^}]*}" "$dir/scaling_eager.log"; tail -4 "$dir/scaling_eager.log"
      fi ;;
    *) echo "unknown step: $step (contexts, alloc, alloc8, idle, kernels, slots8, slots16, scaling, eager)"; exit 2 ;;
  esac
done
