"""Device facts: how much memory TensorFlow may allocate on a GPU or the CPU, and what its
allocator wastes of it (the measurements behind both: docs/memory.md).

Usable GPU memory: TensorFlow leaves part of the GPU to the system (`MinSystemMemory` in
tensorflow/core/common_runtime/gpu/gpu_device.cc) and the CUDA context takes ~0.3 GiB.
"""

import dataclasses

GIB = 2**30
MIB = 2**20

# BFC fragmentation: the largest (smallest limit that runs / peak in use) of
# `benchmarks/memory.py --mode=bfc`, rounded up.
GPU_ALLOCATOR_OVERHEAD = 1.04
CPU_ALLOCATOR_OVERHEAD = 1.0  # the CPU pool grows on demand
# Resident memory of a training process on the CPU beyond the planner's count of its tensors: the
# TensorFlow runtime, Python, the libraries, the traced graphs, kernel caches and the allocator's
# pool beyond its peak in use (on a GPU it stays in host RAM, off the device). It grows with the
# padded lengths a run trains on (length buckets: 16 at max_seq_length 128, 48 at 384) and levels
# off once each has been seen. Measured as the peak resident set (/usr/bin/time -v; VmHWM of
# /proc/self/status) less the planner's tensors (`Estimate.replica_total`) and the float32
# prediction copy (`Estimate.prediction_copy`), on `train.py --init_checkpoint=<all-MiniLM-L6-v2>`
# runs with the default length buckets that predict after training (records of the first 2,502
# train and 401 dev questions, --max_eval_examples=300; TensorFlow 2.20 with oneDNN, a 2-core AMD
# EPYC with AVX512-BF16): at seq 128, batch 4 for 80 steps 1256 MiB (float32) and 1324 (bfloat16;
# 1324 for 240 steps too), 8 x 2 accumulated for 60 steps 1196, 16 for 80 steps 1169; at seq 384,
# batch 4 for 80 steps (200 questions) 1468 (bfloat16) and 1467 (float32): rounded up to
# 1.45 GiB. Without length buckets the seq-384 run needed 964 MiB; 3 steps without prediction or
# buckets at seq 128, 1.2 GiB.
CPU_PROCESS_BYTES = int(1.45 * GIB)
# Each further logical CPU device (--num_cpu_devices under mirrored) adds its own graphs, kernels
# and pool: the peak resident set less TensorFlow's allocator peak of 2 mirrored replicas of 8
# (seq 128, bfloat16, 60 steps, 300 questions) was 1709 MiB, against 1368 MiB for one replica of
# 16 (the same global batch): 341 MiB more (436 more than one replica of 4), rounded up to
# 0.35 GiB (the count's tensors of the two replicas, 1147 MiB, exceed their measured 1070).
CPU_REPLICA_PROCESS_BYTES = int(0.35 * GIB)


def overhead_for(device):
  """The allocator overhead factor of `device` ("gpu" or "cpu").

  Raises:
    ValueError: any other device name.
  """
  if device not in ("gpu", "cpu"):
    raise ValueError(f"device must be 'gpu' or 'cpu', not {device!r}")
  return GPU_ALLOCATOR_OVERHEAD if device == "gpu" else CPU_ALLOCATOR_OVERHEAD


def process_bytes(device, replicas=1):
  """Bytes of the training process itself that share `device`'s ("gpu" or "cpu") memory with its
  tensors: on the CPU `CPU_PROCESS_BYTES`, plus `CPU_REPLICA_PROCESS_BYTES` for each of the
  `replicas` (logical CPU devices) after the first; 0 on a GPU (the process lives in host RAM).

  Raises:
    ValueError: any other device name.
  """
  overhead_for(device)  # checks the name
  if device != "cpu":
    return 0
  return CPU_PROCESS_BYTES + (replicas - 1) * CPU_REPLICA_PROCESS_BYTES


def usable_gpu_bytes(capacity_bytes):
  """Bytes TensorFlow can allocate on a GPU of `capacity_bytes`: 95 % minus 0.3 GiB."""
  return max(0, int(capacity_bytes * 0.95 - 0.3 * GIB))


def _read_kib_field(path, field):
  """The value of a "Field:  N kB" line of `path` in bytes, or None (no such file or line)."""
  try:
    with open(path) as f:
      for line in f:
        if line.startswith(field + ":"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return None


def host_available_bytes():
  """`MemAvailable` of /proc/meminfo in bytes (Linux), else None."""
  return _read_kib_field("/proc/meminfo", "MemAvailable")


def own_anonymous_bytes():
  """This process's anonymous resident memory in bytes (`RssAnon` of /proc/self/status, Linux),
  else 0: the part of its resident set that `MemAvailable` leaves out (its file-backed pages, the
  libraries' code, stay in MemAvailable as reclaimable page cache)."""
  return _read_kib_field("/proc/self/status", "RssAnon") or 0


@dataclasses.dataclass(frozen=True)
class Device:
  """Where training runs and how much of its memory TensorFlow may use (`usable_bytes`, bytes)."""
  kind: str  # "gpu" or "cpu"
  usable_bytes: int
  description: str  # for messages, e.g. "12.0 GiB GPU (--device_memory_gb), 11.1 GiB usable"


def device_from_flag(device_memory_gb):
  """A GPU of `device_memory_gb` GiB of capacity (the number on the box), as `--gpu
  --device_memory_gb` names it."""
  usable = usable_gpu_bytes(device_memory_gb * GIB)
  return Device("gpu", usable, f"{device_memory_gb:g} GiB GPU ({usable / GIB:.1f} GiB usable)")


def detect_device(device_memory_gb=None):
  """The `Device` TensorFlow trains on: the first visible GPU with its allocator limit, else the
  CPU with the host's available RAM (`MemAvailable`) plus what this process holds of it
  (`own_anonymous_bytes`: the count includes the whole process); `device_memory_gb` (GiB, a GPU's
  capacity or the CPU's RAM) replaces the detected memory."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  gpu_visible = bool(tf.config.list_physical_devices("GPU"))
  if device_memory_gb:
    if gpu_visible:
      return device_from_flag(device_memory_gb)
    return Device("cpu", int(device_memory_gb * GIB),
                  f"CPU with {device_memory_gb:g} GiB of RAM (--device_memory_gb)")
  if gpu_visible:
    from tensorflow.python.client import device_lib  # pylint: disable=g-import-not-at-top
    for d in device_lib.list_local_devices():
      if d.device_type == "GPU":
        return Device(
            "gpu", int(d.memory_limit), f"GPU ({d.physical_device_desc}), TensorFlow may allocate "
            f"{d.memory_limit / GIB:.1f} GiB")
  available = host_available_bytes() or 0
  # The estimate counts the training process whole (`process_bytes`), and MemAvailable already
  # left out what this process holds (TensorFlow loaded to plan): it is added back, once. It is
  # the training process (train.py), or the planner, whose memory is free again when it exits.
  own = own_anonymous_bytes() if available else 0
  usable = available + own
  return Device(
      "cpu", usable, f"CPU with {usable / GIB:.1f} GiB of RAM available" +
      (f" ({own / GIB:.2f} GiB of it held by this process)" if own else ""))


def format_bytes(n):
  """1536 -> '1.5 KiB'; binary units (GPU and TensorFlow memory is counted in MiB/GiB)."""
  for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
    if abs(n) >= size:
      return f"{n / size:.2f} {unit}" if unit == "GiB" else f"{n / size:.1f} {unit}"
  return f"{int(n)} B"
