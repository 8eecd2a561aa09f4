"""Compute precision: a tf_keras dtype policy for one build, and whether this CPU has fast bfloat16
(and int8 dot products).

bfloat16 matmuls run at about twice the float32 rate on a CPU with AVX512-BF16 or AMX
(docs/training.md "bfloat16 training on the CPU"); elsewhere TensorFlow emulates them and they may
be slower than float32. `cpu_has_native_bfloat16` is the one check of that, for training
(tasks/train_and_evaluate.py) and for loading a bfloat16 export (serving/saved_model_qa.py);
`cpu_has_int8_dot_product` the same for an int8 export. `bfloat16_needs_xla` says where bfloat16
training must be compiled with XLA.
"""

import contextlib
import functools

CPUINFO_FILE = "/proc/cpuinfo"
# /proc/cpuinfo flags of x86 CPUs with bfloat16 matmul instructions.
BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
# /proc/cpuinfo flags of x86 CPUs with int8 dot-product instructions (VNNI, AMX-INT8): without them
# int8 matmuls take several instructions per multiply-add and may run slower than float32's FMAs.
INT8_CPU_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


def cpu_has_native_bfloat16(cpuinfo=None):
  """Whether the CPU has bfloat16 matmul instructions (AVX512-BF16 or AMX-BF16).

  Args:
    cpuinfo: the text of /proc/cpuinfo; default: read it.

  Returns:
    True or False from the first "flags" line; None when that cannot be told (no /proc/cpuinfo,
    as on macOS or Windows, or no "flags" line, as on ARM).
  """
  return _has_any_cpu_flag(BFLOAT16_CPU_FLAGS, cpuinfo)


def bfloat16_needs_xla(cpuinfo=None):
  """Whether bfloat16 compute on this CPU should be compiled with XLA: where it has no bfloat16
  matmuls (`cpu_has_native_bfloat16` is False).

  There TensorFlow 2.20's Einsum kernel, which computes every projection and attention product of
  tfm's encoder, sums its products in bfloat16 (oneDNN takes bfloat16 only where the CPU has
  AVX-512): measured on an AVX2 CPU, a bfloat16 einsum with 1,024 terms per sum is off by 1.5 % of
  the mean output magnitude (median), a bfloat16 tf.matmul of the same operands by 0.18 % (its
  output rounding, 2^-9). The tiny model's bfloat16 weight gradients were then up to 27-36 % from
  float32's (under XLA 3.6 %; tests/tasks/test_training.py bounds it at 10 %), and MiniLM-sized
  training steps ran at 0.19-0.20 examples/s against 2.53-2.56 under XLA and 2.65-3.00 in float32.
  XLA's dot sums in float32.

  Args:
    cpuinfo: the text of /proc/cpuinfo; default: read it.

  Returns:
    True only where the CPU is known to lack bfloat16 matmuls.
  """
  return cpu_has_native_bfloat16(cpuinfo) is False


def cpu_has_int8_dot_product(cpuinfo=None):
  """Whether the CPU has int8 dot-product instructions (AVX512-VNNI, AVX-VNNI or AMX-INT8).

  Args:
    cpuinfo: the text of /proc/cpuinfo; default: read it.

  Returns:
    True, False, or None when that cannot be told (as `cpu_has_native_bfloat16`).
  """
  return _has_any_cpu_flag(INT8_CPU_FLAGS, cpuinfo)


def _has_any_cpu_flag(names, cpuinfo):
  """Whether the first "flags" line of `cpuinfo` (default: this machine's) holds one of `names`;
  None without /proc/cpuinfo or a "flags" line."""
  if cpuinfo is None:
    cpuinfo = _this_cpuinfo()
    if cpuinfo is None:
      return None
  flags_line = next(
      (line for line in cpuinfo.splitlines() if line.split(":")[0].strip() == "flags"), None)
  if flags_line is None:
    return None
  return bool(set(names) & set(flags_line.partition(":")[2].split()))


@functools.lru_cache(maxsize=None)
def _this_cpuinfo():
  """The text of /proc/cpuinfo, read once per process (None where there is none)."""
  try:
    with open(CPUINFO_FILE, encoding="utf-8", errors="replace") as f:
      return f.read()
  except OSError:
    return None


@contextlib.contextmanager
def global_policy(policy):
  """Sets the global tf_keras dtype policy for the `with` block and restores the previous one.

  Layers take the global policy when they are created, so a model built inside the block keeps
  `policy` after it, while the rest of the process stays as it was.

  Args:
    policy: a tf_keras policy name ("float32", "mixed_bfloat16", ...) or Policy; None leaves the
      global policy alone.
  """
  if policy is None:
    yield
    return
  # Imported here: train.py's config reads this module's CPU checks before TensorFlow loads.
  import tf_keras  # pylint: disable=g-import-not-at-top
  previous = tf_keras.mixed_precision.global_policy()
  tf_keras.mixed_precision.set_global_policy(policy)
  try:
    yield
  finally:
    tf_keras.mixed_precision.set_global_policy(previous)
