"""Device facts: how much memory TensorFlow may allocate on a GPU or the CPU, and what its
allocator wastes of it.

Allocator overhead. On a GPU, TensorFlow allocates from one pool with its BFC allocator
(xla/tsl/framework/bfc_allocator.cc: best fit with coalescing, a free chunk is split only when it
is at least twice the request), so a request fails when no contiguous free chunk is large enough
even if enough bytes are free in total. `GPU_ALLOCATOR_OVERHEAD` is that fragmentation, measured:
TensorFlow's CPU device can run on the same BFC code with a hard limit
(TF_CPU_ALLOCATOR_USE_BFC=true, TF_CPU_BFC_MEM_LIMIT_IN_MB), and `benchmarks/memory.py --mode=bfc`
finds the smallest limit under which real training steps run and divides it by the peak of bytes in
use without a limit. Over tiny and MiniLM configurations at 128-384 tokens, for this tool and for
the TF1 program, that ratio is 0.96-1.03: `GPU_ALLOCATOR_OVERHEAD` = 1.04, the largest rounded up.
(The CPU's BFC grows its pool in regions of doubling size that a chunk cannot span, so it should
fragment no less than a GPU's single pre-allocated region; cuBLAS workspaces, XLA's buffers and
mixed precision are not exercised.) TensorFlow's default CPU allocator has no fixed limit (with
oneDNN it is a BFC pool that grows with the host's memory), so fragmentation cannot fail a step
there: `CPU_ALLOCATOR_OVERHEAD` = 1.0. How close the count is to the peak is a separate question,
answered by `benchmarks/memory.py --mode=cpu` (this tool: measured/predicted 0.81-1.10).

Usable GPU memory. TensorFlow leaves part of the GPU to the system: max(300 MiB, 5 %) of the free
memory in TF 1.x, 500-1800 MiB by compute capability in TF 2.x (`MinSystemMemory` in
tensorflow/core/common_runtime/gpu/gpu_device.cc), and the CUDA context takes ~0.3 GiB before that.
`usable_gpu_bytes` assumes 5 % + 0.3 GiB: a 12 GiB card leaves 11.1 GiB, the "about 11 GB" that
TF 1.11 could allocate on the Titan X of google-research/bert's out-of-memory table; a 16 GiB P100
leaves 14.9 GiB. When a GPU is visible, its own allocator limit (`memory_limit` of
`device_lib.list_local_devices()`) is used instead.
"""

import dataclasses

GIB = 2**30
MIB = 2**20

# BFC fragmentation: smallest memory limit under which real training steps run / their peak bytes
# in use, the largest ratio measured by `benchmarks/memory.py --mode=bfc` (module docstring).
GPU_ALLOCATOR_OVERHEAD = 1.04
CPU_ALLOCATOR_OVERHEAD = 1.0  # the CPU pool grows on demand (module docstring)


def overhead_for(device):
  """The allocator overhead factor of `device` ("gpu" or "cpu"); see the module docstring.

  Raises:
    ValueError: any other device name.
  """
  if device not in ("gpu", "cpu"):
    raise ValueError(f"device must be 'gpu' or 'cpu', not {device!r}")
  return GPU_ALLOCATOR_OVERHEAD if device == "gpu" else CPU_ALLOCATOR_OVERHEAD


def usable_gpu_bytes(capacity_bytes):
  """Memory TensorFlow can allocate on a GPU of `capacity_bytes`: 95 % minus 0.3 GiB.

  TensorFlow leaves max(300 MiB, 5 %) of the free memory to the system (TF 1.x `MinSystemMemory`)
  and the CUDA context takes ~0.3 GiB first; see the module docstring. 12 GiB -> 11.1 GiB.
  """
  return max(0, int(capacity_bytes * 0.95 - 0.3 * GIB))


def host_available_bytes():
  """`MemAvailable` of /proc/meminfo in bytes (Linux), else None."""
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return None


@dataclasses.dataclass(frozen=True)
class Device:
  """Where training runs and how much of its memory TensorFlow may use."""
  kind: str  # "gpu" or "cpu"
  usable_bytes: int
  description: str  # for messages, e.g. "12.0 GiB GPU (--device_memory_gb), 11.1 GiB usable"


def device_from_flag(device_memory_gb):
  """A GPU of `device_memory_gb` GiB of capacity (the number on the box)."""
  usable = usable_gpu_bytes(device_memory_gb * GIB)
  return Device("gpu", usable, f"{device_memory_gb:g} GiB GPU ({usable / GIB:.1f} GiB usable)")


def detect_device(device_memory_gb=None):
  """The device TensorFlow trains on, with the memory it may use.

  Args:
    device_memory_gb: memory in GiB given by the user instead of detecting it: a GPU's capacity
      when a GPU is visible, else the RAM to plan the CPU with.

  Returns:
    A `Device`: the first visible GPU (TensorFlow places training there even without --gpu) with
    its allocator limit (`memory_limit` of device_lib.list_local_devices(), already net of the
    system reserve); else the CPU with the host's available RAM.
  """
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
  return Device("cpu", available, f"CPU with {available / GIB:.1f} GiB of RAM available")


def format_bytes(n):
  """1536 -> '1.5 KiB'; binary units (GPU and TensorFlow memory is counted in MiB/GiB)."""
  for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
    if abs(n) >= size:
      return f"{n / size:.2f} {unit}" if unit == "GiB" else f"{n / size:.1f} {unit}"
  return f"{int(n)} B"
