set -u
. benchmarks/device_setup.sh
nproc > OUT/nproc.txt; ls /dev | grep nvidia >> OUT/nproc.txt
bash benchmarks/throughput_gpu.sh pinned 24 > /dev/null 2>&1
KSMITH_TIMING_CPUS=off bash benchmarks/throughput_gpu.sh unpinned 24 > /dev/null 2>&1
python - <<'PY'
import json, os
for name in ("pinned", "unpinned"):
    p = os.path.join(os.environ["OUT"], "throughput", f"{name}_24workers.json")
    try:
        t = json.load(open(p))["throughput"][0]
    except Exception as e:
        print(name, "missing", e); continue
    print(name, round(t["per_minute"], 1), t["statuses"], t["median_timing_loop_ms"], t["median_timed_check_ms"])
PY
tar czf OUT/tp.tgz -C OUT throughput nproc.txt
