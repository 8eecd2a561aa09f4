"""TensorFlow's fast CPU settings, set as environment variables before TensorFlow loads unless the
user set them: `TF_ENABLE_ONEDNN_OPTS=1` (oneDNN kernels, which TensorFlow enables by itself only
on CPUs with AVX512-VNNI, AVX512-BF16 or AMX), `TF_CPU_ALLOCATOR_USE_BFC=1` (an allocator that
keeps its memory instead of page-faulting large tensors each step) and `TF_USE_LEGACY_KERAS=1`
(tf.keras is tf_keras, as tfm needs). Gains: docs/benchmarks.md ("CPU runtime settings").
"""

import os
import sys

SETTINGS = {
    "TF_ENABLE_ONEDNN_OPTS": "1",
    "TF_CPU_ALLOCATOR_USE_BFC": "1",
    "TF_USE_LEGACY_KERAS": "1"
}


def apply():
  """Sets each of SETTINGS the environment lacks; returns those set too late (tensorflow already
  imported)."""
  missing = [name for name in SETTINGS if name not in os.environ]
  for name in missing:
    os.environ[name] = SETTINGS[name]
  return missing if "tensorflow" in sys.modules else []


apply()
