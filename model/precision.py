"""Compute precision: a tf_keras dtype policy for one build, and whether this CPU has fast bfloat16
matmuls (docs/training.md "bfloat16 training on the CPU")."""

import contextlib
import functools

CPUINFO_FILE = "/proc/cpuinfo"
AUTO = "auto"  # --mixed_precision_dtype's default: chosen by the device (`compute_dtype`)
# --mixed_precision_dtype (tfm's runtime.mixed_precision_dtype) -> the tf_keras dtype policy.
POLICIES = {"float32": "float32", "float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}
# /proc/cpuinfo flags of x86 CPUs with bfloat16 matmul instructions.
BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def compute_dtype(mixed_precision_dtype, gpu):
  """train.py's compute dtype as (a key of `POLICIES`, why in a few words): `mixed_precision_dtype`
  as typed, or for `AUTO` the device's choice (`auto_compute_dtype`)."""
  if mixed_precision_dtype != AUTO:
    return mixed_precision_dtype, f"--mixed_precision_dtype={mixed_precision_dtype}"
  return auto_compute_dtype(gpu)


def auto_compute_dtype(gpu):
  """train.py's `--mixed_precision_dtype=auto` as (compute dtype, why in a few words): float16 with
  `gpu`; on the CPU bfloat16 where it has bfloat16 matmuls (`cpu_has_native_bfloat16`), else
  float32."""
  if gpu:
    return "float16", "auto: --gpu"
  native = cpu_has_native_bfloat16()
  if native:
    return "bfloat16", "auto: this CPU has bfloat16 matmuls (AVX512-BF16 or AMX)"
  return "float32", ("auto: this CPU has no bfloat16 matmuls (AVX512-BF16 or AMX)"
                     if native is False else "auto: bfloat16 matmuls of this CPU unknown")


def cpu_has_native_bfloat16(cpuinfo=None):
  """Whether the CPU has bfloat16 matmuls (AVX512-BF16, AMX-BF16) per `cpuinfo` (default: read
  /proc/cpuinfo); None without /proc/cpuinfo or a "flags" line (macOS, Windows, ARM)."""
  return _has_any_cpu_flag(BFLOAT16_CPU_FLAGS, cpuinfo)


def bfloat16_needs_xla(cpuinfo=None):
  """True only where the CPU is known to lack bfloat16 matmuls: there TensorFlow's Einsum sums in
  bfloat16, XLA's dot in float32 (docs/training.md "bfloat16 training on the CPU")."""
  return cpu_has_native_bfloat16(cpuinfo) is False


def _has_any_cpu_flag(names, cpuinfo):
  """Whether the first "flags" line of `cpuinfo` holds one of `names` (None: no such line)."""
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
  """/proc/cpuinfo's text, read once (None where there is none)."""
  try:
    with open(CPUINFO_FILE, encoding="utf-8", errors="replace") as f:
      return f.read()
  except OSError:
    return None


@contextlib.contextmanager
def global_policy(policy):
  """Sets the global tf_keras dtype policy (a name or Policy; None: unchanged) for the block.

  Layers built inside keep `policy`; the previous global policy is restored on exit.
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
