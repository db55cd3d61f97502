# Streamed trials (a shared hold per trial and per comparison) against the default (one hold for all the
# trials, one comparison of all): ORDER=streamfirst or defaultfirst.
. benchmarks/device_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
run() { if [ "$1" = stream ]; then KSMITH_STREAM_TRIALS=1 bash benchmarks/throughput_gpu.sh stream 24 > /dev/null 2>&1; else bash benchmarks/throughput_gpu.sh default 24 > /dev/null 2>&1; fi; }
if [ "${ORDER:-defaultfirst}" = streamfirst ]; then run stream; run default; else run default; run stream; fi
grep -h -E "^\(b\)|GPU lock|isolation" $OUT/throughput/*.log | cut -c1-200
cd $OUT && tar czf throughput.tgz throughput && rm -rf throughput
