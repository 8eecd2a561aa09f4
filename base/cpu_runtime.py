"""TensorFlow's fast CPU settings, set before TensorFlow loads: oneDNN kernels, a caching allocator,
and Keras 2 as tf.keras.

Importing this module sets three environment variables unless the user already set them (a value the
user gave always wins, e.g. `TF_ENABLE_ONEDNN_OPTS=0` for bit-for-bit Eigen results):

- `TF_ENABLE_ONEDNN_OPTS=1`: TensorFlow's oneDNN (MKL) kernels for MatMul, BatchMatMul, Einsum and
  element-wise fusions. TensorFlow turns them on by itself only on CPUs with AVX512-VNNI,
  AVX512-BF16 or AMX (TF 2.9 release notes); on an AVX2 CPU it runs its Eigen kernels, whose batch
  matmuls with the small head size of attention (32-64) are the slowest ops of a BERT step.
- `TF_CPU_ALLOCATOR_USE_BFC=1`: the best-fit-with-coalescing allocator for CPU tensors, which keeps
  memory it has allocated. The default allocator is malloc, which hands tensors over 32 MB back
  to the OS (glibc mmap), so every step page-faults and zero-fills its [batch, heads, seq, seq]
  attention tensors again (113 MB each for 16 x 12 heads x 384 x 384 float32). Those two, measured
  on this project's 2-core machine (AMD EPYC, AVX2, no AVX512), one float32 train step of
  all-MiniLM-L6-v2 on 16 x 384 tokens, median of 4: default 13.4 s, BFC 10.0 s, oneDNN 8.8 s, both
  8.0 s. Results differ from the Eigen kernels' by float32 rounding only (oneDNN sums in another
  order).

- `TF_USE_LEGACY_KERAS=1`: tf.keras is tf_keras (Keras 2), the Keras tfm and this project build
  with. Without it, `import tensorflow` also imports Keras 3 (which TensorFlow 2.20 installs beside
  it), and with it scikit-learn, pandas and matplotlib: 12.0 s against 10.0 s for importing
  tensorflow, tf_keras and tfm's networks on an AMD EPYC Zen 3, in every process of every command.

All three are read when TensorFlow loads, so each command imports this module before
anything imports tensorflow (the first project import of train.py, export.py, ask.py, the benchmarks
and tests/conftest.py). A process that imported tensorflow earlier keeps TensorFlow's defaults:
`apply()` then returns the settings it could not make.
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
