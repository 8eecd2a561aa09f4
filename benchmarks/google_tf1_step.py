r"""Memory of google-research/bert's TF1 training step, rebuilt op for op, against the planner.

    python benchmarks/google_tf1_step.py --model=base --seq=32 --batch=2
    python benchmarks/google_tf1_step.py --model=minilm --seq=128 --batch=16 --bisect

google-research/bert's published out-of-memory table (Titan X 12 GB, TensorFlow 1.11) measured
*its* program, not ours, so the planner counts that program separately
(`model.memory.estimate.GOOGLE_RESEARCH_TF1`). This script checks that count where it can be
checked: it builds the same graph with TF1 semantics (graph mode, reference variables,
`tf.gradients`, `Session.run`) and the same op structure as modeling.py / run_squad.py /
optimization.py:
TF 1.11's dropout (x / keep_prob * floor(keep_prob + uniform), a float32 mask), layer norm from
`tf.nn.moments` + `tf.nn.batch_normalization` (tf.contrib.layers.layer_norm), the erf GELU,
per-layer attention-mask adders, start/end logits with one-hot cross-entropy,
`clip_by_global_norm(1.0)` and AdamWeightDecayOptimizer's update written out in ops
(beta_1 * m + (1 - beta_1) * g, ..., weight decay 0.01 except LayerNorm and biases).

It prints TensorFlow's allocator peak over training steps next to the planner's count of the TF1
program with and without the "early products" (beta_1 * m, beta_2 * v, decay * param, which
depend on variables only, so the executor computes them when the step starts). With --bisect it
also finds the smallest TF_CPU_BFC_MEM_LIMIT_IN_MB under which the steps run (the BFC allocator's
overhead for this program, as benchmarks/memory_bfc.py does for ours).
"""

import argparse
import json
import math
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def build_step(config, batch_size, seq_length):
  """Builds the TF1-style training graph; returns (train_op, loss)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  v1 = tf.compat.v1
  b, s, h = batch_size, seq_length, config.hidden_size
  a, i = config.num_attention_heads, config.intermediate_size
  d = h // a
  init = v1.truncated_normal_initializer(stddev=0.02)
  rng = __import__("numpy").random.default_rng(0)
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

  def gelu(x):  # modeling.py as of TF 1.11 (erf form)
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
      x = tf.reshape(tf.reshape(x, [b, s, h]) + tf.slice(positions, [0, 0], [s, -1])[None],
                     [b * s, h])
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

  loss = (cross_entropy(start_logits, start_positions) + cross_entropy(end_logits, end_positions)) / 2
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


def child(args):
  # In TF1 graph mode the CPU device reports allocator stats (get_memory_info) only when its
  # allocator is TF's BFC allocator; without it the peak comes back unavailable.
  os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import dataclasses  # pylint: disable=g-import-not-at-top
  from squad_qa.model.memory import estimate  # pylint: disable=g-import-not-at-top
  tf.compat.v1.disable_eager_execution()
  tf.compat.v1.disable_resource_variables()
  if args.model == "base":
    config = estimate.presets()["BERT-Base"]
  else:
    from benchmarks import memory_cpu  # pylint: disable=g-import-not-at-top
    config = memory_cpu.bert_config(args.model)
  config = dataclasses.replace(config, exact_gelu=True)
  status, peak = "OK", None
  try:
    train_op, loss = build_step(config, args.batch, args.seq)
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
  print(json.dumps({"status": status, "peak": peak, "count": with_early.subtotal,
                    "count_without_early": without.subtotal,
                    "early": with_early.early_update}))


def run_child(args, limit_mib=None):
  """The child's JSON result; with `limit_mib`, under that BFC limit ({"status": "OOM"} if the
  process dies of it before printing one)."""
  from benchmarks import memory_cpu  # pylint: disable=g-import-not-at-top
  env = ({"TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_CPU_BFC_MEM_LIMIT_IN_MB": str(int(limit_mib))}
         if limit_mib else {})
  result, proc = memory_cpu.run_child_json(
      __file__, [f"--model={args.model}", f"--seq={args.seq}", f"--batch={args.batch}"], **env)
  if result is None:
    if limit_mib:
      return {"status": "OOM"}
    raise RuntimeError(proc.stderr[-3000:])
  return result


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--model", default="base", choices=["tiny", "minilm", "base"])
  parser.add_argument("--seq", type=int, default=32)
  parser.add_argument("--batch", type=int, default=2)
  parser.add_argument("--bisect", action="store_true",
                      help="also find the smallest BFC limit under which the steps run")
  args = parser.parse_args()
  if args.child:
    child(args)
    return
  mib = 2 ** 20
  r = run_child(args)
  print(f"{args.model} seq {args.seq} batch {args.batch}, TF1 graph, float32:")
  if r["peak"]:
    print(f"  allocator peak over 2 steps     {r['peak'] / mib:9.0f} MiB")
  print(f"  planner, TF1 program            {r['count'] / mib:9.0f} MiB "
        f"(of which early products {r['early'] / mib:.0f})")
  print(f"  planner, without early products {r['count_without_early'] / mib:9.0f} MiB")
  if r["peak"]:
    print(f"  peak / count: {r['peak'] / r['count']:.3f} (without early products: "
          f"{r['peak'] / r['count_without_early']:.3f})")
  if args.bisect:
    from benchmarks import memory_bfc  # pylint: disable=g-import-not-at-top
    high = memory_bfc.bisect_limit(lambda limit: run_child(args, limit)["status"] == "OK",
                                   int(r["count"] / mib * 0.6), int(r["count"] / mib * 2.0))
    print(f"  smallest BFC limit that runs    {high:9d} MiB = {high * mib / r['count']:.3f} x count "
          f"({high * mib / r['count_without_early']:.3f} x the count without early products)")


if __name__ == "__main__":
  main()
