"""TensorFlow's fast CPU settings, set before TensorFlow loads: oneDNN kernels, a caching allocator,
and Keras 2 as tf.keras.

Importing this module sets three environment variables unless the user already set them (a value
the user gave always wins, e.g. `TF_ENABLE_ONEDNN_OPTS=0` for Eigen's kernels):

- `TF_ENABLE_ONEDNN_OPTS=1`: oneDNN's kernels for MatMul, BatchMatMul, Einsum and element-wise
  fusions. TensorFlow turns them on by itself only on CPUs with AVX512-VNNI, AVX512-BF16 or AMX
  (TF 2.9 release notes); Eigen's batch matmuls at attention's small head size are the slowest ops
  of a BERT step. Results differ from Eigen's by float32 rounding (another summation order).
- `TF_CPU_ALLOCATOR_USE_BFC=1`: the best-fit-with-coalescing allocator, which keeps the memory it
  allocated. The default, malloc, hands tensors over 32 MB back to the OS, so every step
  page-faults and zero-fills its [batch, heads, seq, seq] attention tensors again.
- `TF_USE_LEGACY_KERAS=1`: tf.keras is tf_keras (Keras 2), the Keras tfm builds with; without it
  `import tensorflow` also imports Keras 3 and its dependencies in every process.

docs/benchmarks.md ("CPU runtime settings") has what each setting saves. All three are read when
TensorFlow loads, so every command, benchmark and tests/conftest.py imports this module before
anything imports tensorflow. A process that imported tensorflow earlier keeps TensorFlow's
defaults: `apply()` then returns the settings it could not make.
"""

import os
import sys

# Environment variable -> value set when the user has not set it.
SETTINGS = {
    "TF_ENABLE_ONEDNN_OPTS": "1",
    "TF_CPU_ALLOCATOR_USE_BFC": "1",
    "TF_USE_LEGACY_KERAS": "1"
}


def apply():
  """Sets each of SETTINGS that the environment does not hold yet.

  Returns:
    The names that were not in the environment but could not take effect because tensorflow was
    already imported (empty when this runs first, as intended).
  """
  missing = [name for name in SETTINGS if name not in os.environ]
  for name in missing:
    os.environ[name] = SETTINGS[name]
  return missing if "tensorflow" in sys.modules else []


apply()
