# Sourced by the GPU scripts beside it: on a machine without network, the dependency wheels carried in .whl/
# are installed to /tmp/site, and ksmith itself with --no-deps (the machine's own torch and triton stay).
if [ -d .whl ]; then
  python -m pip install -q --no-deps --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
  python -m pip install -q --no-deps --no-build-isolation -e . > /dev/null 2>&1
fi
