#!/usr/bin/env bash
# One short GPU session: install, run the gpu-marked tests, then the CUDA benchmark.
# Results go to $OUT (or ./gpu-results) so they can be read back after the run.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-results}"
mkdir -p "$out"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
python -m pip install --quiet -e '.[test]' > "$out/install.txt" 2>&1
python -c "import torch; print(torch.__version__, torch.cuda.is_available())" > "$out/torch.txt" 2>&1 \
    || python -m pip install --quiet torch >> "$out/install.txt" 2>&1
python -m pytest -q -m gpu tests/emit_cuda tests/sparse/test_sparse_gpu.py > "$out/gpu-tests.txt" 2>&1
echo "gpu tests exit $?" >> "$out/gpu-tests.txt"
python benchmarks/cuda.py --json > "$out/cuda-bench.txt" 2>&1
echo "benchmark exit $?" >> "$out/cuda-bench.txt"
python benchmarks/tune.py --gpu --small --gpu-trials 16 --json > "$out/tune-gpu.txt" 2>&1
echo "tune benchmark exit $?" >> "$out/tune-gpu.txt"
tail -n 30 "$out"/gpu-tests.txt "$out"/cuda-bench.txt "$out"/tune-gpu.txt
