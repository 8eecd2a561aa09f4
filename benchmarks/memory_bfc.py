r"""The GPU allocator's overhead over the planner's count, measured with TensorFlow's own BFC allocator.

    python -m benchmarks.memory_bfc                 # ~20 minutes on 2 cores
    python -m benchmarks.memory_bfc --only=minilm:128:16

On a GPU TensorFlow allocates every tensor from one pool with its BFC allocator
(xla/tsl/framework/bfc_allocator.cc), and a step fails when no free chunk is large enough, even
if enough bytes are free in total. The CPU device can use the same allocator with a hard limit
(TF_CPU_ALLOCATOR_USE_BFC=true, TF_CPU_BFC_MEM_LIMIT_IN_MB), so fragmentation can be measured
here: for each configuration, bisect the smallest limit (MiB) under which a fresh process builds
the span model and AdamW slots and runs two real training steps (`question_answering.make_train_step`) without
ResourceExhaustedError, and divide it by the allocator's peak of bytes in use in the same run
without a limit: the fragmentation. Its largest value is
`model.memory.device.GPU_ALLOCATOR_OVERHEAD`. The planner's count (`Estimate.subtotal`, before any
allocator overhead) is printed next to it.

The CPU's BFC grows its pool in regions of doubling size (allow_growth), and a chunk cannot span
two regions, so it should fragment no less than a GPU's single pre-allocated region (cuBLAS
workspaces, XLA's buffers and mixed precision are not exercised here).

The child alone (`--child --device=GPU:0 --precision=float16`) runs the same two steps on a GPU
under mixed_float16 and prints that device's peak: benchmarks/gpu_check.py compares it with the
count.
"""

import argparse
import json
import os
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = [("tiny", 384, 32), ("minilm", 128, 16), ("minilm", 256, 16), ("minilm", 384, 8)]


def child(args):
  """Two training steps of one configuration on `args.device` ("CPU:0" or "GPU:0") in
  `args.precision` ("float32", or "float16": mixed_float16 with loss scaling); prints one JSON line:
  status (OK or OOM), the device's allocator peak and the planner's count, both in bytes."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from benchmarks import memory_cpu  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import optimization  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import question_answering  # pylint: disable=g-import-not-at-top
  from squad_qa.model import span_model  # pylint: disable=g-import-not-at-top
  from squad_qa.model.memory import estimate  # pylint: disable=g-import-not-at-top
  policy = question_answering.set_precision_policy(args.precision)
  config = memory_cpu.bert_config(args.model)
  b, s = args.batch, args.seq
  status = "OK"
  try:
    model, _ = span_model.build_span_model(config)
    optimizer = optimization.create_optimizer(5e-5, 1000, 0.1,
                                              loss_scale=args.precision == "float16")
    optimizer._create_all_weights(question_answering.trained_variables(model))  # pylint: disable=protected-access
    rng = np.random.default_rng(0)
    batch = {
        "input_word_ids": tf.constant(rng.integers(1000, config.vocab_size, (b, s)), tf.int32),
        "input_mask": tf.ones((b, s), tf.int32),
        "input_type_ids": tf.constant(np.repeat([[0] * (s // 4) + [1] * (s - s // 4)], b, 0),
                                      tf.int32),
        "start_positions": tf.constant(rng.integers(0, s, b), tf.int32),
        "end_positions": tf.constant(rng.integers(0, s, b), tf.int32),
    }
    step = question_answering.make_train_step(model, optimizer, 1)
    for _ in range(2):
      float(step(batch))
  except tf.errors.ResourceExhaustedError:
    status = "OOM"
  est = estimate.estimate(config, s, b, policy, args.device.split(":")[0].lower())
  peak = tf.config.experimental.get_memory_info(args.device)["peak"]
  print(json.dumps({"status": status, "peak": peak, "count": est.subtotal}))


def run_child(model, seq, batch, limit_mib):
  """'OK' or 'OOM' (also for a process that dies of the limit elsewhere), allocator peak, count."""
  from benchmarks import memory_cpu  # pylint: disable=g-import-not-at-top
  result, _ = memory_cpu.run_child_json(
      __file__, [f"--model={model}", f"--seq={seq}", f"--batch={batch}"],
      TF_CPU_ALLOCATOR_USE_BFC="true", TF_CPU_BFC_MEM_LIMIT_IN_MB=str(int(limit_mib)))
  return result or {"status": "OOM", "peak": None, "count": None}


def bisect_limit(runs_under, low, high):
  """The smallest limit in [low, high] MiB (within 1 %) for which `runs_under(limit)` is true.

  `runs_under` must be monotonic (a run that fits under a limit fits under any larger one) and
  true at `high`; returns `low` itself when even that runs. Raises RuntimeError when `high` fails.
  """
  if not runs_under(high):
    raise RuntimeError(f"does not run under {high} MiB")
  if runs_under(low):
    return low
  while high - low > max(4, 0.01 * high):
    middle = (low + high) // 2
    low, high = (low, middle) if runs_under(middle) else (middle, high)
  return high


def smallest_limit(model, seq, batch):
  """Bisects the smallest BFC limit (MiB) that runs; returns it with the count and the peak (MiB)."""
  free = run_child(model, seq, batch, 1 << 20)  # no effective limit
  if free["status"] != "OK":
    raise RuntimeError(f"{model} {seq}x{batch} fails even without a limit")
  count_mib, peak_mib = free["count"] / 2 ** 20, free["peak"] / 2 ** 20
  limit = bisect_limit(lambda mib: run_child(model, seq, batch, mib)["status"] == "OK",
                       int(count_mib * 0.7), int(max(count_mib, peak_mib) * 1.6) + 16)
  return limit, count_mib, peak_mib


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--model", default="minilm", choices=["tiny", "minilm"])
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--device", default="CPU:0", choices=["CPU:0", "GPU:0"],
                      help="where the child's steps run and its peak is read")
  parser.add_argument("--precision", default="float32", choices=["float32", "float16"],
                      help="the child's compute dtype (float16: mixed_float16, loss scaling)")
  parser.add_argument("--only", default=None, help="model:seq:batch,... instead of the default set")
  args = parser.parse_args()
  if args.child:
    child(args)
    return
  configs = CONFIGS
  if args.only:
    configs = [(m, int(s), int(b)) for m, s, b in (c.split(":") for c in args.only.split(","))]
  from squad_qa.model.memory import device as memory_device  # pylint: disable=g-import-not-at-top
  print("float32, AdamW, 2 training steps per run; MiB")
  print("model    seq batch   count  peak in use (no limit)  smallest limit that runs  "
        "limit/peak  limit/count")
  started, ratios = time.time(), []
  for model, seq, batch in configs:
    limit, count, peak = smallest_limit(model, seq, batch)
    ratios.append(limit / peak)
    print(f"{model:<8} {seq:>3} {batch:>5} {count:>7.0f} {peak:>23.0f} {limit:>25.0f} "
          f"{limit / peak:>11.3f} {limit / count:>12.3f}", flush=True)
  print(f"largest limit/peak: {max(ratios):.3f} (model.memory.device.GPU_ALLOCATOR_OVERHEAD"
        f" = {memory_device.GPU_ALLOCATOR_OVERHEAD:g}); {time.time() - started:.0f} s")


if __name__ == "__main__":
  main()
