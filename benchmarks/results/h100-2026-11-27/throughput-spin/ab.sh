# Interleaved A/B of the rolling spin: ORDER=newfirst runs the tree then the patch reversed; else base first.
. benchmarks/device_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
python -c "import torch,triton;print(torch.__version__,triton.__version__)" >> $OUT/gpu.txt
python -m pytest -q -p no:cacheprovider tests/triton/test_timing_spin.py > $OUT/spin_tests.log 2>&1; tail -1 $OUT/spin_tests.log
if [ "${ORDER:-newfirst}" = newfirst ]; then
  bash benchmarks/throughput_ab.sh .whl/spin.patch 24
else
  git apply -R .whl/spin.patch
  bash benchmarks/throughput_gpu.sh base 24
  git apply .whl/spin.patch
  bash benchmarks/throughput_gpu.sh new 24
fi
cd $OUT && tar czf throughput.tgz throughput && rm -rf throughput
