# The rolling spin on another machine: the workload twice with the tree as it is.
. benchmarks/device_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
python -c "import torch,triton;print(torch.__version__,triton.__version__)" >> $OUT/gpu.txt
bash benchmarks/throughput_gpu.sh new 24 > /dev/null 2>&1
bash benchmarks/throughput_gpu.sh new2 24 > /dev/null 2>&1
grep -h -E "^\(b\)|GPU lock|isolation" $OUT/throughput/*.log | cut -c1-200
cd $OUT && tar czf throughput.tgz throughput && rm -rf throughput
