r"""The memory planner (model/memory/) against measurements of real training steps.

    python -m benchmarks.memory [--mode=cpu] [--xla] [--only=base:32:2]
    python -m benchmarks.memory --mode=bfc [--only=minilm:128:16]
    python -m benchmarks.memory --mode=google_tf1 [--model=base] [--seq=32] [--batch=2] [--bisect]
    python -m benchmarks.memory --mode=checkpoint [--workdir=ckpt_bench] [--layers=12]

Every measurement runs in a fresh child process (`--child`), so one run's heap cannot hide
another's; each child prints one JSON line. Models: tiny (tests/testutil.py's 2 layers x 64),
minilm (the packaged all-MiniLM-L6-v2 config), base (BERT-Base, random weights). Bytes are MiB in
the tables.

cpu: the child builds the span model and AdamW slots, runs `question_answering.make_train_step` on
  synthetic batches of the exact shape once (tracing), then reads TensorFlow's CPU allocator
  (`tf.config.experimental.get_memory_info`), resets its peak and runs --steps more steps.
  Measured step memory = allocator peak during those steps - bytes in use before them, against
  the planner's `Estimate.step_bytes`; the whole process's peak against `Estimate.replica_total`
  (its tensors; `Estimate.total` adds the process itself on the CPU). glibc's
  mmap threshold is pinned at 64 KiB (MALLOC_MMAP_THRESHOLD_) so that the resident set follows live
  memory. --xla adds XLA on/off at MiniLM 384 x 16, alternating (speed and step memory).
bfc: TensorFlow's BFC allocator, a GPU's, on the CPU device with a hard limit
  (TF_CPU_ALLOCATOR_USE_BFC, TF_CPU_BFC_MEM_LIMIT_IN_MB): bisects the smallest limit under which a
  child runs two training steps and divides it by the peak bytes in use without a limit
  (fragmentation); its largest value backs `model.memory.device.GPU_ALLOCATOR_OVERHEAD`. The child
  alone with `--device=GPU:0 --precision=float16` gives a GPU's peak under mixed_float16
  (benchmarks/gpu_check.py).
google_tf1: google-research/bert's TF1 training step rebuilt op for op in graph mode (reference
  variables, `tf.gradients`, TF 1.11's float32 dropout masks, layer norm from `tf.nn.moments`, the
  erf GELU, `clip_by_global_norm(1.0)`, AdamWeightDecayOptimizer's update written out in ops), its
  allocator peak over two steps against the planner's `program=GOOGLE_RESEARCH_TF1` count with and
  without the "early products" (beta_1 * m, beta_2 * v, decay * param, computed when the step
  starts); --bisect adds its smallest BFC limit.
checkpoint: a child writes a random TF1 checkpoint of --layers layers at BERT-Base width with
  google-research names and pre-training heads; then seconds and peak resident memory of building
  the span model, loading it as --init_checkpoint, converting it once (model.convert_checkpoint)
  and loading the converted TF2 checkpoint.
"""

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time

from squad_qa.flags import command_line

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULE = "benchmarks.memory"
MIB = 2**20
MODES = ("cpu", "bfc", "google_tf1", "checkpoint")
TF1_FOLDER = "uncased_L-12_H-768_A-12"  # as Google's release names it
# (model, max_seq_length, batch[, "mixed": mixed_float16, slow on the CPU]) each mode measures.
CPU_CONFIGS = [("tiny", 128, 8), ("tiny", 384, 32), ("tiny", 384, 32, "mixed"), ("minilm", 128, 8),
               ("minilm", 128, 32), ("minilm", 256, 16), ("minilm", 384, 4), ("minilm", 384, 16),
               ("minilm", 384, 32)]
BFC_CONFIGS = [("tiny", 384, 32), ("minilm", 128, 16), ("minilm", 256, 16), ("minilm", 384, 8)]
# --model, --seq, --batch of one child when not given.
CHILD_DEFAULTS = {
    "cpu": ("minilm", 128, 8),
    "bfc": ("minilm", 128, 16),
    "google_tf1": ("base", 32, 2)
}


def run_child_json(module, options, **env):
  """Runs `python -m <module> --child options...` in a fresh process from the repository root (so
  `squad_qa`, `benchmarks` and `tests` import), TensorFlow's C++ log quiet, plus `env`.

  Returns:
    (the last line of its stdout that starts with "{", parsed, or None if there is none; the
    subprocess.CompletedProcess).
  """
  environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env)
  proc = subprocess.run([sys.executable, "-m", module, "--child", *options], env=environment,
                        cwd=REPO, capture_output=True, text=True, check=False)
  lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
  return (json.loads(lines[-1]) if lines else None), proc


def _proc_status_bytes(field):
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1]) * 1024
  raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak_rss():
  with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


def bert_config(model_name):
  from squad_qa.model import bert_config as bert_config_lib  # pylint: disable=g-import-not-at-top
  from squad_qa.model.memory import estimate  # pylint: disable=g-import-not-at-top
  from tests import testutil  # pylint: disable=g-import-not-at-top
  if model_name == "tiny":
    return bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG)
  if model_name == "base":
    return estimate.presets()["BERT-Base"]
  return bert_config_lib.BertConfig.from_json_file(
      os.path.join(testutil.minilm_dir(), "config.json"))


def training_step(config, seq, batch_size, precision, xla=False):
  """(train step, a synthetic batch) of a fresh span model with its AdamW slots created, under
  `precision` ("float32", or "float16": mixed_float16 with loss scaling)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from squad_qa.model import span_model  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import optimization  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import question_answering  # pylint: disable=g-import-not-at-top
  model, _ = span_model.build_span_model(config)
  optimizer = optimization.create_optimizer(5e-5, 1000, 0.1, loss_scale=precision == "float16")
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  variables = question_answering.trained_variables(model)
  inner._create_all_weights(variables)  # pylint: disable=protected-access
  rng = np.random.default_rng(0)
  b, s = batch_size, seq
  batch = {
      "input_word_ids": tf.constant(rng.integers(1000, config.vocab_size, (b, s)), tf.int32),
      "input_mask": tf.ones((b, s), tf.int32),
      "input_type_ids": tf.constant(np.repeat([[0] * (s // 4) + [1] * (s - s // 4)], b, 0),
                                    tf.int32),
      "start_positions": tf.constant(rng.integers(0, s, b), tf.int32),
      "end_positions": tf.constant(rng.integers(0, s, b), tf.int32),
  }
  return question_answering.make_train_step(model, optimizer, 1, jit_compile=xla), batch


# --mode=cpu


def cpu_child(args):
  """One configuration's step memory and speed on the CPU; prints one JSON line."""
  from squad_qa.base import cpu_runtime  # noqa: F401
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from squad_qa.model import span_model  # noqa: F401  (loaded before the RSS baseline)
  from squad_qa.model.memory import estimate  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import optimization  # noqa: F401
  from squad_qa.tasks import question_answering  # pylint: disable=g-import-not-at-top
  rss_tf = _proc_status_bytes("VmRSS")  # the modules loaded, nothing built
  policy = question_answering.set_precision_policy(args.precision)
  config = bert_config(args.model)
  step, batch = training_step(config, args.seq, args.batch, args.precision, args.xla)
  rss_model = _proc_status_bytes("VmRSS")
  alloc_static = tf.config.experimental.get_memory_info("CPU:0")["current"]
  rss_before_first = _proc_status_bytes("VmRSS")
  _reset_peak_rss()
  tf.config.experimental.reset_memory_stats("CPU:0")
  started = time.time()
  float(step(batch))
  first_step_seconds = time.time() - started
  rss_peak_first = _proc_status_bytes("VmHWM")
  alloc_before = tf.config.experimental.get_memory_info("CPU:0")["current"]
  rss_before = _proc_status_bytes("VmRSS")
  _reset_peak_rss()
  tf.config.experimental.reset_memory_stats("CPU:0")
  started = time.time()
  for _ in range(args.steps):
    float(step(batch))
  seconds = (time.time() - started) / args.steps
  alloc_peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
  rss_peak = _proc_status_bytes("VmHWM")
  est = estimate.estimate(config, args.seq, args.batch, policy, "cpu")
  print(
      json.dumps({
          "model": args.model,
          "seq": args.seq,
          "batch": args.batch,
          "xla": args.xla,
          "dtype": policy,
          "predicted_step": est.step_bytes,
          "predicted_total": est.replica_total,
          "predicted_static": est.weights + est.optimizer_slots,
          "allocator_step": alloc_peak - alloc_before,
          "allocator_static": alloc_static,
          "allocator_peak": alloc_peak,
          "rss_first_step": rss_peak_first - rss_before_first,
          "rss_steps": rss_peak - rss_before,
          "rss_peak_over_tf": max(rss_peak, rss_peak_first) - rss_tf,
          "rss_model": rss_model - rss_tf,
          "seconds_per_step": seconds,
          "first_step_seconds": first_step_seconds,
          "examples_per_second": args.batch / seconds
      }))


def run_cpu_child(model, seq, batch, steps, xla=False, mixed=False):
  options = [
      "--mode=cpu", f"--model={model}", f"--seq={seq}", f"--batch={batch}", f"--steps={steps}",
      f"--precision={'float16' if mixed else 'float32'}"
  ]
  result, proc = run_child_json(MODULE, options + (["--xla"] if xla else []),
                                MALLOC_MMAP_THRESHOLD_="65536")
  if proc.returncode or result is None:
    raise RuntimeError(f"{' '.join(proc.args)} failed:\n{proc.stderr[-3000:]}")
  return result


def cpu_table(args):
  configs = CPU_CONFIGS
  if args.only is not None:  # --only= (empty) with --xla: the XLA comparison alone
    configs = [
        tuple(int(v) if v.isdigit() else v for v in c.split(":")) for c in args.only.split(",") if c
    ]
  print("                          ---- one step (MiB) ----------------   "
        "---- whole process (MiB) ------------")
  print("model        seq batch    predicted  allocator ratio  RSS 1st   predicted  allocator "
        "ratio  RSS peak  s/step")
  started = time.time()
  results = []
  for model, seq, batch, *mixed in configs:
    r = run_cpu_child(model, seq, batch, args.steps, mixed=bool(mixed))
    results.append(r)
    name = model + (" fp16" if mixed else "")
    print(
        f"{name:<12} {seq:>3} {batch:>5}   {r['predicted_step'] / MIB:>9.0f}  "
        f"{r['allocator_step'] / MIB:>9.0f} {r['allocator_step'] / r['predicted_step']:>5.2f}"
        f"  {r['rss_first_step'] / MIB:>7.0f}   {r['predicted_total'] / MIB:>9.0f}  "
        f"{r['allocator_peak'] / MIB:>9.0f} {r['allocator_peak'] / r['predicted_total']:>5.2f}"
        f"  {r['rss_peak_over_tf'] / MIB:>8.0f}  {r['seconds_per_step']:>6.2f}", flush=True)
  for key, name in (("allocator_step", "step"), ("allocator_peak", "total")) if results else ():
    ratios = [r[key] / r["predicted_" + name] for r in results]
    print(f"measured/predicted {name}: min {min(ratios):.2f}, max {max(ratios):.2f}")
  print(f"({time.time() - started:.0f} s)")
  if args.xla:
    steps = max(args.steps, 3)
    print("\nXLA (jit_compile) on the CPU, MiniLM-L6, seq 384, batch 16, float32 "
          "(off and on alternate, so a change of load hits both):")
    rates = {False: [], True: []}
    for xla in (False, True, False, True):
      r = run_cpu_child("minilm", 384, 16, steps, xla=xla)
      rates[xla].append(r["examples_per_second"])
      print(
          f"  xla={'on ' if xla else 'off'}  {r['examples_per_second']:.2f} examples/s "
          f"({r['seconds_per_step']:.2f} s/step over {steps} steps, first step "
          f"{r['first_step_seconds']:.0f} s), allocator step memory "
          f"{r['allocator_step'] / MIB:.0f} MiB (planner {r['predicted_step'] / MIB:.0f})",
          flush=True)
    print(f"  mean: off {sum(rates[False]) / 2:.2f}, on {sum(rates[True]) / 2:.2f} examples/s")


# --mode=bfc


def bfc_child(args):
  """Two training steps on `args.device` in `args.precision`; prints one JSON line: status (OK or
  OOM), the device's allocator peak and the planner's count, in bytes."""
  from squad_qa.base import cpu_runtime  # noqa: F401
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from squad_qa.model.memory import estimate  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import question_answering  # pylint: disable=g-import-not-at-top
  policy = question_answering.set_precision_policy(args.precision)
  config = bert_config(args.model)
  status = "OK"
  try:
    step, batch = training_step(config, args.seq, args.batch, args.precision)
    for _ in range(2):
      float(step(batch))
  except tf.errors.ResourceExhaustedError:
    status = "OOM"
  est = estimate.estimate(config, args.seq, args.batch, policy, args.device.split(":")[0].lower())
  peak = tf.config.experimental.get_memory_info(args.device)["peak"]
  print(json.dumps({"status": status, "peak": peak, "count": est.subtotal}))


def bisect_limit(runs_under, low, high):
  """The smallest limit in [low, high] MiB (within 1 %) for which `runs_under(limit)` is true.

  `runs_under` must be monotonic (a run that fits under a limit fits under any larger one) and
  true at `high`; returns `low` itself when even that runs.

  Raises:
    RuntimeError: `high` fails.
  """
  if not runs_under(high):
    raise RuntimeError(f"does not run under {high} MiB")
  if runs_under(low):
    return low
  while high - low > max(4, 0.01 * high):
    middle = (low + high) // 2
    low, high = (low, middle) if runs_under(middle) else (middle, high)
  return high


def run_bfc_child(model, seq, batch, limit_mib):
  """'OK' or 'OOM' (also for a process that dies of the limit elsewhere), allocator peak, count."""
  result, _ = run_child_json(MODULE,
                             ["--mode=bfc", f"--model={model}", f"--seq={seq}", f"--batch={batch}"],
                             TF_CPU_ALLOCATOR_USE_BFC="true",
                             TF_CPU_BFC_MEM_LIMIT_IN_MB=str(int(limit_mib)))
  return result or {"status": "OOM", "peak": None, "count": None}


def bfc_table(args):
  from squad_qa.model.memory import device as memory_device  # pylint: disable=g-import-not-at-top
  configs = BFC_CONFIGS
  if args.only:
    configs = [(m, int(s), int(b)) for m, s, b in (c.split(":") for c in args.only.split(","))]
  print("float32, AdamW, 2 training steps per run; MiB")
  print("model    seq batch   count  peak in use (no limit)  smallest limit that runs  "
        "limit/peak  limit/count")
  started, ratios = time.time(), []
  for model, seq, batch in configs:
    free = run_bfc_child(model, seq, batch, 1 << 20)  # no effective limit
    if free["status"] != "OK":
      raise RuntimeError(f"{model} {seq}x{batch} fails even without a limit")
    count, peak = free["count"] / MIB, free["peak"] / MIB
    limit = bisect_limit(lambda mib: run_bfc_child(model, seq, batch, mib)["status"] == "OK",
                         int(count * 0.7),
                         int(max(count, peak) * 1.6) + 16)
    ratios.append(limit / peak)
    print(
        f"{model:<8} {seq:>3} {batch:>5} {count:>7.0f} {peak:>23.0f} {limit:>25.0f} "
        f"{limit / peak:>11.3f} {limit / count:>12.3f}", flush=True)
  print(f"largest limit/peak: {max(ratios):.3f} (model.memory.device.GPU_ALLOCATOR_OVERHEAD"
        f" = {memory_device.GPU_ALLOCATOR_OVERHEAD:g}); {time.time() - started:.0f} s")


# --mode=google_tf1


def build_tf1_step(config, batch_size, seq_length):
  """google-research/bert's training graph (modeling.py, run_squad.py, optimization.py) in TF1
  graph mode on a synthetic batch; returns (train_op, loss)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  v1 = tf.compat.v1
  b, s, h = batch_size, seq_length, config.hidden_size
  a, i = config.num_attention_heads, config.intermediate_size
  d = h // a
  init = v1.truncated_normal_initializer(stddev=0.02)
  rng = np.random.default_rng(0)
  input_ids = tf.constant(rng.integers(1000, config.vocab_size, (b, s)), tf.int32)
  input_mask = tf.ones((b, s), tf.int32)
  segment_ids = tf.constant([[0] * (s // 4) + [1] * (s - s // 4)] * b, tf.int32)
  start_positions = tf.constant(rng.integers(0, s, b), tf.int32)
  end_positions = tf.constant(rng.integers(0, s, b), tf.int32)

  def dropout(x, prob):  # TF 1.11 nn_ops.dropout
    keep = 1.0 - prob
    binary = tf.floor(keep + tf.random.uniform(tf.shape(x), dtype=x.dtype))
    return tf.math.divide(x, keep) * binary

  def layer_norm(x, name):  # tf.contrib.layers.layer_norm(begin_norm_axis=-1)
    with v1.variable_scope(name):
      beta = v1.get_variable("beta", [h], initializer=v1.zeros_initializer())
      gamma = v1.get_variable("gamma", [h], initializer=v1.ones_initializer())
      mean, variance = tf.nn.moments(x, [-1], keepdims=True)
      return tf.nn.batch_normalization(x, mean, variance, beta, gamma, 1e-12)

  def dense(x, units, name):  # tf.layers.dense on a 2-D input
    with v1.variable_scope(name):
      kernel = v1.get_variable("kernel", [x.shape[-1], units], initializer=init)
      bias = v1.get_variable("bias", [units], initializer=v1.zeros_initializer())
      return tf.nn.bias_add(tf.matmul(x, kernel), bias)

  def gelu(x):  # modeling.py's erf form
    return x * (0.5 * (1.0 + tf.math.erf(x / tf.sqrt(2.0))))

  def heads(x):  # [b*s, h] -> [b, a, s, d]
    return tf.transpose(tf.reshape(x, [b, s, a, d]), [0, 2, 1, 3])

  with v1.variable_scope("bert"):
    with v1.variable_scope("embeddings"):
      table = v1.get_variable("word_embeddings", [config.vocab_size, h], initializer=init)
      x = tf.gather(table, tf.reshape(input_ids, [-1]))
      types = v1.get_variable("token_type_embeddings", [config.type_vocab_size, h],
                              initializer=init)
      x += tf.matmul(tf.one_hot(tf.reshape(segment_ids, [-1]), config.type_vocab_size), types)
      positions = v1.get_variable("position_embeddings", [config.max_position_embeddings, h],
                                  initializer=init)
      x = tf.reshape(
          tf.reshape(x, [b, s, h]) + tf.slice(positions, [0, 0], [s, -1])[None], [b * s, h])
      x = dropout(layer_norm(x, "LayerNorm"), config.hidden_dropout_prob)
    to_mask = tf.cast(tf.reshape(input_mask, [b, 1, s]), tf.float32)
    mask = tf.ones([b, s, 1], tf.float32) * to_mask
    for layer in range(config.num_hidden_layers):
      with v1.variable_scope(f"encoder/layer_{layer}"):
        q, k, v = (dense(x, h, n) for n in ("query", "key", "value"))
        scores = tf.multiply(tf.matmul(heads(q), heads(k), transpose_b=True), 1.0 / math.sqrt(d))
        scores += (1.0 - tf.expand_dims(mask, 1)) * -10000.0
        probs = dropout(tf.nn.softmax(scores), config.attention_probs_dropout_prob)
        context = tf.reshape(tf.transpose(tf.matmul(probs, heads(v)), [0, 2, 1, 3]), [b * s, h])
        attention = dropout(dense(context, h, "attention_output"), config.hidden_dropout_prob)
        attention = layer_norm(attention + x, "attention_LayerNorm")
        intermediate = gelu(dense(attention, i, "intermediate"))
        output = dropout(dense(intermediate, h, "output"), config.hidden_dropout_prob)
        x = layer_norm(output + attention, "output_LayerNorm")
  with v1.variable_scope("cls/squad"):
    weights = v1.get_variable("output_weights", [2, h], initializer=init)
    bias = v1.get_variable("output_bias", [2], initializer=v1.zeros_initializer())
    logits = tf.nn.bias_add(tf.matmul(x, weights, transpose_b=True), bias)
    start_logits, end_logits = tf.unstack(tf.transpose(tf.reshape(logits, [b, s, 2]), [2, 0, 1]))

  def cross_entropy(logits, positions):
    one_hot = tf.one_hot(positions, depth=s, dtype=tf.float32)
    return -tf.reduce_mean(tf.reduce_sum(one_hot * tf.nn.log_softmax(logits, axis=-1), axis=-1))

  loss = (cross_entropy(start_logits, start_positions) +
          cross_entropy(end_logits, end_positions)) / 2
  variables = v1.trainable_variables()
  grads = tf.gradients(loss, variables)
  grads, _ = tf.clip_by_global_norm(grads, clip_norm=1.0)
  assignments = []
  for grad, param in zip(grads, variables):  # optimization.py's AdamWeightDecayOptimizer
    name = param.op.name
    m = v1.get_variable(name + "/adam_m", param.shape, tf.float32, v1.zeros_initializer(),
                        trainable=False)
    v = v1.get_variable(name + "/adam_v", param.shape, tf.float32, v1.zeros_initializer(),
                        trainable=False)
    next_m = tf.multiply(0.9, m) + tf.multiply(1.0 - 0.9, grad)
    next_v = tf.multiply(0.999, v) + tf.multiply(1.0 - 0.999, tf.square(grad))
    update = next_m / (tf.sqrt(next_v) + 1e-6)
    if not any(key in name for key in ("LayerNorm", "layer_norm", "bias")):
      update += 0.01 * param
    assignments += [param.assign(param - 5e-5 * update), m.assign(next_m), v.assign(next_v)]
  return tf.group(*assignments), loss


def google_tf1_child(args):
  """The TF1 step's allocator peak over two steps and the planner's counts; one JSON line."""
  # In TF1 graph mode the CPU device reports allocator stats only through TF's BFC allocator.
  os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
  import dataclasses  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from squad_qa.model.memory import estimate  # pylint: disable=g-import-not-at-top
  tf.compat.v1.disable_eager_execution()
  tf.compat.v1.disable_resource_variables()
  config = dataclasses.replace(bert_config(args.model), exact_gelu=True)
  status, peak = "OK", None
  try:
    train_op, loss = build_tf1_step(config, args.batch, args.seq)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      session.run([train_op, loss])
      try:
        tf.config.experimental.reset_memory_stats("CPU:0")
      except (ValueError, RuntimeError):
        pass
      for _ in range(2):
        session.run([train_op, loss])
    try:
      peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    except (ValueError, RuntimeError):
      peak = None
  except tf.errors.ResourceExhaustedError:
    status = "OOM"
  with_early = estimate.estimate(config, args.seq, args.batch, "float32", "cpu",
                                 program=estimate.GOOGLE_RESEARCH_TF1)
  without = dataclasses.replace(with_early, early_update=0)
  print(
      json.dumps({
          "status": status,
          "peak": peak,
          "count": with_early.subtotal,
          "count_without_early": without.subtotal,
          "early": with_early.early_update
      }))


def run_google_tf1_child(args, limit_mib=None):
  """The child's JSON result; with `limit_mib`, under that BFC limit ({"status": "OOM"} when the
  process dies of it before printing one)."""
  env = ({
      "TF_CPU_ALLOCATOR_USE_BFC": "true",
      "TF_CPU_BFC_MEM_LIMIT_IN_MB": str(int(limit_mib))
  } if limit_mib else {})
  result, proc = run_child_json(
      MODULE,
      ["--mode=google_tf1", f"--model={args.model}", f"--seq={args.seq}", f"--batch={args.batch}"],
      **env)
  if result is None:
    if limit_mib:
      return {"status": "OOM"}
    raise RuntimeError(proc.stderr[-3000:])
  return result


def google_tf1(args):
  r = run_google_tf1_child(args)
  print(f"{args.model} seq {args.seq} batch {args.batch}, TF1 graph, float32:")
  if r["peak"]:
    print(f"  allocator peak over 2 steps     {r['peak'] / MIB:9.0f} MiB")
  print(f"  planner, TF1 program            {r['count'] / MIB:9.0f} MiB "
        f"(of which early products {r['early'] / MIB:.0f})")
  print(f"  planner, without early products {r['count_without_early'] / MIB:9.0f} MiB")
  if r["peak"]:
    print(f"  peak / count: {r['peak'] / r['count']:.3f} (without early products: "
          f"{r['peak'] / r['count_without_early']:.3f})")
  if args.bisect:
    high = bisect_limit(lambda limit: run_google_tf1_child(args, limit)["status"] == "OK",
                        int(r["count"] / MIB * 0.6), int(r["count"] / MIB * 2.0))
    print(f"  smallest BFC limit that runs    {high:9d} MiB = {high * MIB / r['count']:.3f} x "
          f"count "
          f"({high * MIB / r['count_without_early']:.3f} x the count without early products)")


# --mode=checkpoint


def checkpoint_config(layers):
  from tests.model import test_checkpoints  # pylint: disable=g-import-not-at-top
  return dict(test_checkpoints.CONFIG, vocab_size=30522, hidden_size=768, num_attention_heads=12,
              intermediate_size=3072, num_hidden_layers=layers, max_position_embeddings=512)


def checkpoint_child(args):
  """Writes the random TF1 checkpoint into --workdir."""
  from tests import numpy_bert  # pylint: disable=g-import-not-at-top
  from tests.model import test_checkpoints  # pylint: disable=g-import-not-at-top
  config = checkpoint_config(args.layers)
  params = numpy_bert.random_bert_params(config, pretraining_heads=True)
  test_checkpoints.write_tf1_checkpoint(os.path.join(args.workdir, TF1_FOLDER), params,
                                        config=config)


def checkpoint_loading(args):
  from squad_qa.model import bert_config as bert_config_lib  # pylint: disable=g-import-not-at-top
  from squad_qa.model import checkpoints  # pylint: disable=g-import-not-at-top
  from squad_qa.model import convert_checkpoint  # pylint: disable=g-import-not-at-top
  from squad_qa.model import span_model  # pylint: disable=g-import-not-at-top

  def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

  shutil.rmtree(args.workdir, ignore_errors=True)
  tf1_dir = os.path.join(args.workdir, TF1_FOLDER)
  started = time.time()
  _, proc = run_child_json(
      MODULE, ["--mode=checkpoint", f"--workdir={args.workdir}", f"--layers={args.layers}"])
  if proc.returncode:
    raise RuntimeError(f"{' '.join(proc.args)} failed:\n{proc.stderr[-3000:]}")
  sizes = {f: os.path.getsize(os.path.join(tf1_dir, f)) / MIB for f in os.listdir(tf1_dir)}
  print(f"wrote TF1 checkpoint in {time.time() - started:.1f} s: " +
        ", ".join(f"{f} {mib:.1f} MiB" for f, mib in sorted(sizes.items())))
  started = time.time()
  model, _ = span_model.build_span_model(
      bert_config_lib.BertConfig.from_dict(checkpoint_config(args.layers)))
  print(f"build span model ({model.count_params():,} parameters): {time.time() - started:.1f} s, "
        f"peak RSS {peak_rss_mib():.0f} MiB")
  started = time.time()
  report = checkpoints.initialize_from(model, tf1_dir)
  print(f"load TF1: {time.time() - started:.1f} s, restored {len(report.restored)}, "
        f"peak RSS {peak_rss_mib():.0f} MiB")
  output = os.path.join(args.workdir, "converted")
  started = time.time()
  convert_checkpoint.convert(tf1_dir, output)
  print(f"convert TF1 -> TF2 (build + load + save): {time.time() - started:.1f} s")
  started = time.time()
  report = checkpoints.initialize_from(model, output)
  print(f"load converted TF2: {time.time() - started:.1f} s, restored {len(report.restored)}, "
        f"peak RSS {peak_rss_mib():.0f} MiB")
  shutil.rmtree(args.workdir, ignore_errors=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--mode", default="cpu", choices=MODES)
  parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--model", choices=["tiny", "minilm", "base"],
                      help="one child's model (cpu: minilm, bfc: minilm, google_tf1: base)")
  parser.add_argument("--seq", type=int, help="one child's max_seq_length (128, 128, 32)")
  parser.add_argument("--batch", type=int, help="one child's batch (8, 16, 2)")
  parser.add_argument("--only", default=None,
                      help="cpu, bfc: model:seq:batch[:mixed],... instead of the default set")
  parser.add_argument("--steps", type=int, default=2, help="cpu: measured steps after the first")
  parser.add_argument("--xla", action="store_true",
                      help="cpu: also XLA on/off, MiniLM 384 x 16 (a child: jit_compile)")
  parser.add_argument("--precision", default="float32", choices=["float32", "float16"],
                      help="a cpu or bfc child's compute dtype (float16: mixed_float16)")
  parser.add_argument("--device", default="CPU:0", choices=["CPU:0", "GPU:0"],
                      help="a bfc child's device, where its peak is read")
  parser.add_argument("--bisect", action="store_true",
                      help="google_tf1: also the smallest BFC limit under which the steps run")
  parser.add_argument("--workdir", default="ckpt_bench",
                      help="checkpoint: scratch folder (removed first and after)")
  parser.add_argument("--layers", type=int, default=12, help="checkpoint: encoder layers")
  args = parser.parse_args()
  model, seq, batch = CHILD_DEFAULTS.get(args.mode, (None, None, None))
  args.model, args.seq, args.batch = args.model or model, args.seq or seq, args.batch or batch
  if args.child:
    {
        "cpu": cpu_child,
        "bfc": bfc_child,
        "google_tf1": google_tf1_child,
        "checkpoint": checkpoint_child
    }[args.mode](args)
    return
  {
      "cpu": cpu_table,
      "bfc": bfc_table,
      "google_tf1": google_tf1,
      "checkpoint": checkpoint_loading
  }[args.mode](args)


if __name__ == "__main__":
  command_line.run_argparse(main)
