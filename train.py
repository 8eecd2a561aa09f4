r"""Fine-tunes a BERT encoder for SQuAD span prediction, then predicts and scores the dev set.

  python train.py --records_dir=records --model_dir=model_out \
      --init_checkpoint=<HF BERT folder, google-research TF1 or tfm TF2 checkpoint> [--gpu]

Reads the shards of preprocess/make_records.py with tf.data, builds tf-models-official's
BertEncoder + BertSpanLabeler, trains with tfm's AdamW (linear warmup, then linear decay to 0, global
gradient-norm clipping at 1.0, as google-research/bert), checkpoints to --model_dir and resumes from
the latest checkpoint there. Then it predicts the eval shards, decodes answers (postprocess/), writes
predictions.json and eval_results.json (official SQuAD v1.1 EM/F1) to --model_dir.

--gpu trains under the mixed_float16 policy with dynamic loss scaling; logits and loss stay float32.
Without it everything runs in float32 (mixed_float16 on a CPU is ~40x slower).

Memory (model/memory.py): before training, the planner's estimate for the batch is checked against
the device (stop with a diagnosis and fixes; --nomemory_check overrides); --train_batch_size=auto
picks the largest batch that fits; --gradient_accumulation_steps / --effective_batch_size average
the gradients of several passes into one exact optimizer step; an out-of-memory error during
training stops with the same diagnosis and leaves the last checkpoint as it was.
"""

import collections
import json
import math
import os
import sys
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf
import tf_keras
from official.nlp import optimization
from tensorflow.python.framework import ops as tf_ops  # get_gradient_function: no public API

from flags import definitions
from model import bert_config as bert_config_lib
from model import checkpoints
from model import memory
from model import span_model
from postprocess import span_decoding
from postprocess import squad_scoring
from preprocess import records
from preprocess import squad_reader
from preprocess import wordpiece

definitions.define_squad_file_flags()
definitions.define_tokenizer_flags()
definitions.define_model_flags()
definitions.define_train_flags()
definitions.define_memory_use_flags()
FLAGS = flags.FLAGS

QA_CONFIG_FILE = "qa_config.json"  # in --model_dir: what export.py needs to rebuild the model


class UsageError(ValueError):
  """A problem with flags or inputs; main() prints its one-line message and exits non-zero."""


class OutOfMemoryError(RuntimeError):
  """A training step ran out of device memory; the message is the planner's diagnosis."""


def set_precision_policy(mixed):
  """Sets the global tf_keras policy: "mixed_float16" when `mixed`, else "float32".

  tfm's models are tf_keras (Keras 2) models, so the policy must be set through tf_keras, not Keras 3.
  """
  policy = "mixed_float16" if mixed else "float32"
  tf_keras.mixed_precision.set_global_policy(policy)
  return policy


# Logit given to padding positions in the loss: exp(-1e9 - max) is exactly 0 in float32.
_PADDING_LOGIT = -1e9


def span_loss(start_positions, end_positions, start_logits, end_logits, batch_size=None,
              input_mask=None):
  """Mean over the batch of (CE(start) + CE(end)) / 2, in float32 (run_squad.py's loss).

  Args:
    start_positions, end_positions: int [batch] token indices.
    start_logits, end_logits: [batch, seq] logits (cast to float32 here).
    batch_size: divide the sum over these examples by this many instead (a micro-batch's share
      of a larger batch's mean: see `make_gradient_fn`); default: the examples given.
    input_mask: optional int [batch, seq]: the softmax runs over the positions with mask 1 only
      (padding is never an answer). With it the loss and its gradients do not depend on how far
      a batch is padded, so length-bucketed batches train exactly like fully padded ones;
      run_squad.py's softmax also covers padding.

  Returns:
    A float32 scalar.
  """
  start_logits = tf.cast(start_logits, tf.float32)
  end_logits = tf.cast(end_logits, tf.float32)
  if input_mask is not None:
    real = input_mask > 0
    start_logits = tf.where(real, start_logits, _PADDING_LOGIT)
    end_logits = tf.where(real, end_logits, _PADDING_LOGIT)
  start = tf_keras.losses.sparse_categorical_crossentropy(start_positions, start_logits,
                                                          from_logits=True)
  end = tf_keras.losses.sparse_categorical_crossentropy(end_positions, end_logits,
                                                        from_logits=True)
  if batch_size is None:
    return tf.reduce_mean((start + end) / 2.0)
  return tf.reduce_sum((start + end) / 2.0) / tf.cast(batch_size, tf.float32)


def model_inputs(batch):
  """The three encoder inputs of a batch dict."""
  return {k: batch[k] for k in (span_model.INPUT_WORD_IDS, span_model.INPUT_MASK,
                                span_model.INPUT_TYPE_IDS)}


def create_optimizer(learning_rate, num_train_steps, warmup_proportion, mixed):
  """tfm AdamWeightDecay with linear warmup and linear decay; loss-scaled when `mixed`.

  Returns:
    A tf_keras (legacy) optimizer; under mixed precision a `tf_keras.mixed_precision.
    LossScaleOptimizer` with dynamic loss scaling around it.
  """
  optimizer = optimization.create_optimizer(
      init_lr=learning_rate, num_train_steps=num_train_steps,
      num_warmup_steps=int(num_train_steps * warmup_proportion), optimizer_type="adamw")
  if mixed:
    optimizer = tf_keras.mixed_precision.LossScaleOptimizer(optimizer, dynamic=True)
  return optimizer


def trained_variables(model):
  """The model's trainable variables minus BERT's pooler, which the span head does not use."""
  return [v for v in model.trainable_variables if "pooler_transform" not in v.name]


# Under mixed_float16 every weight gradient is a sum over all batch * seq rows. Computed by the
# float16 op it belongs to, that sum is rounded to float16 (11-bit mantissa) once per pass, and
# on the CPU BiasAddGrad / Sum even accumulate in float16, so one batch of k * b and k passes of b
# would differ by float16 roundings (measured: 3e-4 of every kernel gradient, 2e-2 of bias
# gradients). The forward pass and the activation gradients are per-row: bitwise the same for any
# batch composition. So under float16 the ops that consume a weight get a gradient function
# (through tf.Graph.gradient_override_map) that computes the weight's gradient from the same
# float16 operands cast to float32 (float16 * float16 products are exact in float32); the
# activation gradients stay the op's own float16 gradient. Then the only batch-dependent rounding
# left is float32 summation order. These are the op types tfm's BertEncoder + BertSpanLabeler
# feed a (cast) variable into under mixed_float16 (found by walking the traced graph).
_WEIGHT_CONSUMING_OPS = ("AddV2", "BiasAdd", "BroadcastTo", "Einsum", "MatMul")
_FLOAT32_WEIGHT_GRADIENT = "SquadQaFloat32WeightGradient"
# Ops between a variable's float32 read and the float16 tensor an op consumes (the AutoCastVariable
# cast, tfm PositionEmbedding's slice and reshape).
_VARIABLE_VIEW_OPS = ("Cast", "Identity", "Reshape", "StridedSlice")


def _reads_a_variable(tensor):
  """Whether `tensor` is a (cast, sliced, reshaped) view of a variable's value."""
  op = tensor.op
  while op.type in _VARIABLE_VIEW_OPS:
    op = op.inputs[0].op
  return op.type == "ReadVariableOp"


def _recreate(op, inputs):
  """`op` (one of _WEIGHT_CONSUMING_OPS) applied to `inputs` instead: its first output."""
  if op.type == "Einsum":
    return tf.raw_ops.Einsum(inputs=inputs, equation=op.get_attr("equation"))
  if op.type == "MatMul":
    return tf.raw_ops.MatMul(a=inputs[0], b=inputs[1], transpose_a=op.get_attr("transpose_a"),
                             transpose_b=op.get_attr("transpose_b"))
  if op.type == "BiasAdd":
    return tf.raw_ops.BiasAdd(value=inputs[0], bias=inputs[1],
                              data_format=op.get_attr("data_format"))
  if op.type == "BroadcastTo":
    return tf.raw_ops.BroadcastTo(input=inputs[0], shape=inputs[1])
  return tf.raw_ops.AddV2(x=inputs[0], y=inputs[1])


_OVERRIDDEN_WEIGHT_INPUTS = [0]  # weight inputs given float32 gradients so far (trace time)


@tf.RegisterGradient(_FLOAT32_WEIGHT_GRADIENT)
def _float32_weight_gradient(op, grad):
  """The op's own gradients, except float32 ones for its float16 inputs that read a variable.

  The recreated ops' forward outputs are unused, so TF prunes them; only their gradients run.
  """
  float16_op = _recreate(op, list(op.inputs)).op
  gradients = list(tf_ops.get_gradient_function(float16_op)(float16_op, grad))
  weights = [i for i, t in enumerate(op.inputs)
             if t.dtype == tf.float16 and _reads_a_variable(t)]
  _OVERRIDDEN_WEIGHT_INPUTS[0] += len(weights)
  if weights:
    float32_op = _recreate(op, [tf.cast(t, tf.float32) if t.dtype == tf.float16 else t
                                for t in op.inputs]).op
    float32_gradients = tf_ops.get_gradient_function(float32_op)(float32_op,
                                                                   tf.cast(grad, tf.float32))
    for i in weights:
      gradients[i] = float32_gradients[i]
  return gradients


def computes_in_float16(model):
  """Whether any layer of `model` computes in float16 (a mixed_float16 policy)."""
  return any(getattr(layer, "compute_dtype", None) == "float16"
             for layer in [model] + list(model.submodules))


def make_gradient_fn(model, optimizer, accumulation_steps=1, float32_weight_gradients=True):
  """(loss, gradients) of a batch's mean span loss w.r.t. `trained_variables(model)`.

  With `accumulation_steps` = k > 1 the batch of k * b features is cut, in order, into k
  micro-batches of b; each runs forward and backward alone (a while loop with
  parallel_iterations=1, so one micro-batch's activations are alive at a time) and the float32
  gradients are added. Each pass's loss is its examples' loss sum divided by the whole batch's
  k * b (not its mean times 1/k), so the sum of the passes is the batch mean and the gradient
  entering every row's backward pass is the same number in both, scale / (k * b) * dCE: under
  float16 even a factor 1/k applied afterwards would change which small activation gradients
  round into float16 subnormals. The result is the whole batch's gradient up to float32
  summation order.

  Under loss scaling every pass uses the same scale (it only changes in apply_gradients) and its
  gradients are unscaled in float32 before they are added; an overflow in any pass makes the sum
  non-finite, so the step is skipped and the scale lowered exactly as for one big batch.

  When the model computes in float16 (mixed_float16) and `float32_weight_gradients` is on, the
  forward pass and the activation gradients are float16, row by row, bitwise independent of the
  batch they are in on TF's CPU kernels (XLA and GPU kernels may pick shape-dependent
  algorithms: see BUILD.md); every reduction over the batch * seq rows into a weight gradient
  (kernel, bias, position and type embedding gradients) is computed in float32 from the float16
  operands (see _float32_weight_gradient), so k passes of b give one batch of k * b within
  float32 tolerance here too, and a float16 overflow (inf/nan) can only come from a row's
  activations or their gradients, which are the same in both. This path uses tf.gradients (the
  tape cannot take gradient overrides), so the returned function must run inside a tf.function;
  float32 models, and float16 ones with `float32_weight_gradients` off, use a GradientTape.

  Returns:
    A function batch -> (float32 scalar loss, list of float32 gradients; the word-embedding
    gradient is tf.IndexedSlices when k == 1). `batch` holds int32 [k * b, seq] input_word_ids,
    input_mask, input_type_ids and int32 [k * b] start_positions, end_positions.
  """
  loss_scaled = isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer)
  variables = trained_variables(model)
  float16 = float32_weight_gradients and computes_in_float16(model)

  def loss_and_gradients(batch, batch_size=None):
    if float16:
      overrides = {t: _FLOAT32_WEIGHT_GRADIENT for t in _WEIGHT_CONSUMING_OPS}
      with tf.compat.v1.get_default_graph().gradient_override_map(overrides):
        start_logits, end_logits = model(model_inputs(batch), training=True)
      loss = span_loss(batch["start_positions"], batch["end_positions"], start_logits, end_logits,
                       batch_size, batch["input_mask"])
      scaled = optimizer.get_scaled_loss(loss) if loss_scaled else loss
      overridden = _OVERRIDDEN_WEIGHT_INPUTS[0]
      grads = tf.gradients(scaled, variables)
      if _OVERRIDDEN_WEIGHT_INPUTS[0] == overridden:  # e.g. tfm now feeds weights through other ops
        logging.warning("no weight gradient went through the float32 override (op types %s): "
                        "weight gradients stay float16, and accumulation matches one big batch "
                        "only to float16 rounding", ", ".join(_WEIGHT_CONSUMING_OPS))
    else:
      with tf.GradientTape() as tape:
        start_logits, end_logits = model(model_inputs(batch), training=True)
        loss = span_loss(batch["start_positions"], batch["end_positions"], start_logits,
                         end_logits, batch_size, batch["input_mask"])
        scaled = optimizer.get_scaled_loss(loss) if loss_scaled else loss
      grads = tape.gradient(scaled, variables)
    if loss_scaled:
      grads = optimizer.get_unscaled_gradients(grads)
    return loss, grads

  if accumulation_steps == 1:
    return loss_and_gradients

  def accumulated(batch):
    k = accumulation_steps
    micro = {key: tf.reshape(value, tf.concat([[k, -1], tf.shape(value)[1:]], axis=0))
             for key, value in batch.items()}

    batch_size = tf.shape(batch["start_positions"])[0]

    def body(i, loss_sum, grad_sums):
      loss, grads = loss_and_gradients({key: value[i] for key, value in micro.items()},
                                       batch_size)
      return (i + 1, loss_sum + loss,
              [total + tf.convert_to_tensor(grad) for total, grad in zip(grad_sums, grads)])

    zeros = [tf.zeros(v.shape, tf.float32) for v in variables]
    _, loss_sum, grad_sums = tf.while_loop(lambda i, *_: i < k, body,
                                           (tf.constant(0), tf.constant(0.0), zeros),
                                           parallel_iterations=1)
    return loss_sum, grad_sums

  return accumulated


def make_train_step(model, optimizer, accumulation_steps=1, jit_compile=False,
                    float32_weight_gradients=True):
  """A tf.function running one optimizer step on a batch; returns the (unscaled) float32 loss.

  Args:
    accumulation_steps: micro-batches per step (see `make_gradient_fn`); the batch holds
      accumulation_steps * micro-batch features.
    jit_compile: compile the step with XLA.
    float32_weight_gradients: under a float16 policy, reduce weight gradients in float32 (see
      `make_gradient_fn`); False keeps the ops' own float16 gradients (faster on GPUs without
      TF32; accumulation then matches one big batch to float16 rounding only).
  """
  gradient_fn = make_gradient_fn(model, optimizer, accumulation_steps, float32_weight_gradients)
  variables = trained_variables(model)

  # Length-bucketed batches differ in their seq dimension: reduce_retracing traces once more with
  # seq None at the second shape, then never again (under XLA, one compilation per bucket length).
  @tf.function(jit_compile=jit_compile, reduce_retracing=True)
  def train_step(batch):
    loss, grads = gradient_fn(batch)
    optimizer.apply_gradients(zip(grads, variables))
    return loss

  return train_step


def current_learning_rate(optimizer):
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  schedule = inner.learning_rate
  return float(schedule(inner.iterations)) if callable(schedule) else float(schedule)


def _oom_summary(message):
  """The "OOM when allocating tensor with shape[...]" line of a ResourceExhaustedError message
  (TF puts "Graph execution error:" and the Python stack first), without the device and allocator."""
  lines = [l.strip() for l in message.splitlines() if l.strip()]
  line = next((l for l in lines if l.startswith("OOM when allocating")), lines[0] if lines else "")
  return line.split(" on /job:")[0][:300]


def train(model, dataset, optimizer, model_dir, num_train_steps, batch_size,
          save_checkpoints_steps=1000, init_checkpoint=None, accumulation_steps=1,
          jit_compile=False, float32_weight_gradients=True):
  """Runs the training loop until the optimizer has taken `num_train_steps` steps.

  Resumes from the latest checkpoint in `model_dir` (model and optimizer state, step count); only
  without one are the weights initialized from `init_checkpoint`. Saves every
  `save_checkpoints_steps` steps and at the end; writes loss and learning rate to TensorBoard under
  `model_dir/train`. `batch_size` is the features per optimizer step (the dataset's batch);
  `accumulation_steps`, `jit_compile` and `float32_weight_gradients` go to `make_train_step`.

  Returns:
    {"steps": steps run now, "final_loss": float, "examples_per_second": float}.

  Raises:
    OutOfMemoryError: a step raised tf.errors.ResourceExhaustedError (message: the tensor that
      did not fit and the last checkpoint, which is left as it was).
  """
  checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
  manager = tf.train.CheckpointManager(checkpoint, model_dir, max_to_keep=3)
  if manager.latest_checkpoint:
    checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    logging.info("resumed from %s at step %d", manager.latest_checkpoint,
                 int(optimizer.iterations))
  elif init_checkpoint:
    logging.info("initialized from %s", checkpoints.initialize_from(model, init_checkpoint))
  else:
    logging.warning("no --init_checkpoint: the encoder starts from random weights")
  start_step = int(optimizer.iterations)
  if start_step >= num_train_steps:
    logging.info("already trained %d of %d steps", start_step, num_train_steps)
    return {"steps": 0, "final_loss": float("nan"), "examples_per_second": 0.0}
  train_step = make_train_step(model, optimizer, accumulation_steps, jit_compile,
                               float32_weight_gradients)
  writer = tf.summary.create_file_writer(os.path.join(model_dir, "train"))
  progress = tf_keras.utils.Progbar(num_train_steps, stateful_metrics=["loss", "lr"])
  progress.update(start_step)
  iterator = iter(dataset)
  started = None
  loss = float("nan")
  step = start_step
  while step < num_train_steps:
    try:
      loss = float(train_step(next(iterator)))
    except tf.errors.ResourceExhaustedError as e:
      raise OutOfMemoryError(
          f"step {step + 1} ran out of memory ({_oom_summary(e.message)}); the last checkpoint "
          f"is {manager.latest_checkpoint or 'none (nothing saved yet)'}, unchanged") from None
    step = int(optimizer.iterations)
    if started is None:  # time from the end of the first step: leaves out tracing
      started, first_step = time.time(), step
    if not math.isfinite(loss):
      raise FloatingPointError(f"loss is {loss} at step {step}; lower --learning_rate")
    lr = current_learning_rate(optimizer)
    progress.update(step, [("loss", loss), ("lr", lr)])
    if step % 10 == 0 or step == num_train_steps:
      with writer.as_default(step=step):
        tf.summary.scalar("loss", loss)
        tf.summary.scalar("learning_rate", lr)
    if step % save_checkpoints_steps == 0 or step == num_train_steps:
      manager.save(checkpoint_number=step)
  elapsed = time.time() - started
  rate = (step - first_step) * batch_size / elapsed if elapsed > 0 and step > first_step else 0.0
  logging.info("trained steps %d..%d: final loss %.4f, %.2f examples/s", start_step, step, loss, rate)
  return {"steps": step - start_step, "final_loss": loss, "examples_per_second": rate}


def predict(model, dataset):
  """Runs the model over eval batches.

  Returns:
    {example index: [span_decoding.WindowLogits, ...]} in window order.
  """
  predict_step = tf.function(lambda inputs: model(inputs, training=False))
  windows = collections.defaultdict(list)
  progress = tf_keras.utils.Progbar(None, unit_name="batch")
  for batch in dataset:
    start_logits, end_logits = predict_step(model_inputs(batch))
    arrays = {k: v.numpy() for k, v in batch.items()}
    start_logits, end_logits = start_logits.numpy(), end_logits.numpy()
    for i, example_index in enumerate(arrays["example_index"]):
      windows[int(example_index)].append(span_decoding.WindowLogits(
          start_logits[i], end_logits[i], arrays["token_start_char"][i],
          arrays["token_end_char"][i], arrays["token_is_max_context"][i]))
    progress.add(1)
  return dict(windows)


def evaluate(model, records_dir, meta, predict_file, model_dir, predict_batch_size, n_best_size,
             max_answer_length, max_eval_examples=None, version_2_with_negative=False,
             null_score_diff_threshold=0.0):
  """Predicts the eval shards, writes predictions.json and eval_results.json, returns the scores.

  SQuAD 2.0 (`version_2_with_negative`): the answer is "" when null score - best non-null score >
  `null_score_diff_threshold` (postprocess/span_decoding.null_answer); null_odds.json gets each
  question's difference, and the official v2.0 scorer's figures are returned.

  Raises:
    UsageError: --predict_file is not the file the eval records were made from, or it has
      unanswerable questions without --version_2_with_negative.
  """
  eval_meta = meta["splits"].get(records.EVAL_SPLIT)
  if not eval_meta:
    raise UsageError(f"{records_dir}: no eval records; run make_records.py with --predict_file")
  if wordpiece.file_sha256(predict_file) != eval_meta["input_sha256"]:
    raise UsageError(f"--predict_file={predict_file} is not the file the eval records were made "
                     f"from ({eval_meta['input_file']}); pass that file or rerun make_records.py")
  dataset_json = squad_reader.load_json(predict_file)
  if not version_2_with_negative and squad_scoring.unanswerable_questions(dataset_json):
    raise UsageError(f"--predict_file={predict_file} has "
                     f"{len(squad_scoring.unanswerable_questions(dataset_json))} questions without "
                     f"answers (SQuAD 2.0?); pass --version_2_with_negative")
  squad = squad_reader.read_squad(predict_file, is_training=False,
                                  version_2_with_negative=version_2_with_negative)
  dataset = records.eval_dataset(records.shard_paths(records_dir, meta, records.EVAL_SPLIT),
                                 meta["flags"]["max_seq_length"], predict_batch_size,
                                 max_eval_examples)
  started = time.time()
  windows = predict(model, dataset)
  answers = span_decoding.decode_all(
      windows, {i: squad.contexts[squad.examples[i].paragraph_index] for i in windows},
      n_best_size, max_answer_length)
  ids = {i: squad.examples[i].qas_id for i in sorted(answers)}
  if max_eval_examples is not None:
    dataset_json = squad_scoring.restrict_to_questions(dataset_json, set(ids.values()))
  if version_2_with_negative:
    predictions = {ids[i]: span_decoding.null_answer(answers[i], null_score_diff_threshold)
                   for i in ids}
    null_odds = {ids[i]: answers[i].null_score_diff for i in ids}
    results = squad_scoring.score_v2(dataset_json, predictions, null_odds,
                                     {ids[i]: answers[i].text for i in ids})
    results["null_score_diff_threshold"] = null_score_diff_threshold
    _write_json(os.path.join(model_dir, "null_odds.json"), null_odds)
  else:
    predictions = {ids[i]: answers[i].text for i in ids}
    results = squad_scoring.score_v1(dataset_json, predictions)
  results["predict_seconds"] = time.time() - started
  _write_json(os.path.join(model_dir, "predictions.json"), predictions)
  _write_json(os.path.join(model_dir, "eval_results.json"), results)
  return results


def _write_json(path, value):
  with tf.io.gfile.GFile(path + ".tmp", "w") as f:
    json.dump(value, f, indent=2, ensure_ascii=False)
  tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


def num_train_steps_for(meta, batch_size, num_train_epochs, max_steps):
  """--max_steps if given, else epochs x train features / batch size (at least 1)."""
  if max_steps:
    return max_steps
  num_features = meta["splits"][records.TRAIN_SPLIT]["num_features"]
  return max(1, int(num_features * num_train_epochs / batch_size))


def plan_memory(config, max_seq_length, policy, device):
  """Resolves the batch flags with the memory planner and runs the pre-flight check.

  Returns:
    A `memory.BatchPlan`.

  Raises:
    memory.MemoryPlanError: inconsistent batch flags, or (unless --nomemory_check) the planner
      estimates that the micro-batch does not fit `device`; the message is the diagnosis.
  """
  plan = memory.plan_batches(config, max_seq_length, policy, device, FLAGS.train_batch_size,
                             FLAGS.gradient_accumulation_steps, FLAGS.effective_batch_size)
  if plan.estimate.total > device.usable_bytes:
    message = memory.diagnosis(
        config, max_seq_length, plan.micro_batch_size, policy, device, plan.accumulation_steps,
        headline="the planner estimates that this batch does not fit")
    if FLAGS.memory_check:
      raise memory.MemoryPlanError(message + "\n  - or --nomemory_check to try anyway")
    logging.warning("--nomemory_check: training anyway although %s", message)
  return plan


def train_length_buckets(max_seq_length):
  """--length_buckets resolved for the records: a tuple of padded lengths, or None (off).

  Raises:
    UsageError: a boundary above the records' max_seq_length.
  """
  if FLAGS.length_buckets is None:
    return None
  try:
    return records.length_bucket_boundaries(
        max_seq_length, None if FLAGS.length_buckets == "auto" else FLAGS.length_buckets)
  except ValueError as e:
    raise UsageError(f"--length_buckets: {e}; the records were made with "
                     f"make_records.py --max_seq_length={max_seq_length}") from None


def run():
  """train.py's job from FLAGS; returns the eval results (or None without --do_predict)."""
  if FLAGS.gpu and not tf.config.list_physical_devices("GPU"):
    raise UsageError("--gpu: TensorFlow sees no GPU (tf.config.list_physical_devices('GPU') is "
                     "empty); install a CUDA build of TensorFlow or drop --gpu to train on the CPU")
  policy = set_precision_policy(mixed=FLAGS.gpu)
  tf_keras.utils.set_random_seed(FLAGS.seed)
  meta = records.read_meta(FLAGS.records_dir)
  config_file, vocab_file = checkpoints.resolve_model_files(
      FLAGS.init_checkpoint, FLAGS.bert_config_file, FLAGS.vocab_file)
  saved = os.path.join(FLAGS.model_dir, QA_CONFIG_FILE)
  if not config_file and tf.io.gfile.exists(saved):
    with tf.io.gfile.GFile(saved) as f:
      config_file = json.load(f)["bert_config_file"]
  if not config_file:
    raise UsageError("--bert_config_file is required (or an --init_checkpoint with a config beside it)")
  if vocab_file and wordpiece.file_sha256(vocab_file) != meta["vocab_sha256"]:
    raise UsageError(f"--vocab_file={vocab_file} is not the vocab the records were made with "
                     f"({meta['flags']['vocab_file']}); rerun make_records.py with it")
  config = bert_config_lib.BertConfig.from_json_file(config_file)
  if meta["flags"]["max_seq_length"] > config.max_position_embeddings:
    raise UsageError(f"records have max_seq_length {meta['flags']['max_seq_length']} but the "
                     f"encoder has {config.max_position_embeddings} positions")
  tf.io.gfile.makedirs(FLAGS.model_dir)
  _write_json(saved, {"bert_config_file": os.path.abspath(config_file),
                      "bert_config": config.to_dict(),
                      "vocab_file": os.path.abspath(meta["flags"]["vocab_file"]),
                      **{k: meta["flags"][k] for k in ("do_lower_case", "max_seq_length",
                                                       "doc_stride", "max_query_length")},
                      # export.py bakes these into serve_text's null-answer rule.
                      "version_2_with_negative": bool(
                          FLAGS.version_2_with_negative or
                          meta["flags"].get("version_2_with_negative", False)),
                      "null_score_diff_threshold": FLAGS.null_score_diff_threshold})
  model, _ = span_model.build_span_model(config)
  logging.info("model: %d parameters, policy %s", model.count_params(), policy)
  if FLAGS.do_train:
    max_seq_length = meta["flags"]["max_seq_length"]
    device = memory.detect_device(FLAGS.device_memory_gb)
    plan = plan_memory(config, max_seq_length, policy, device)
    xla = FLAGS.gpu if FLAGS.xla is None else FLAGS.xla
    logging.info("batch: %d features per step = %d x %d accumulated, %s; XLA %s; planner: %s of %s",
                 plan.effective_batch_size, plan.micro_batch_size, plan.accumulation_steps, policy,
                 "on" if xla else "off", memory.format_bytes(plan.estimate.total),
                 device.description)
    steps = num_train_steps_for(meta, plan.effective_batch_size, FLAGS.num_train_epochs,
                                FLAGS.max_steps)
    optimizer = create_optimizer(FLAGS.learning_rate, steps, FLAGS.warmup_proportion, FLAGS.gpu)
    # The planner counts max_seq_length, the largest bucket's length: every batch fits.
    length_buckets = train_length_buckets(max_seq_length)
    logging.info("padded lengths: %s", ", ".join(map(str, length_buckets or [max_seq_length])))
    dataset = records.train_dataset(records.shard_paths(FLAGS.records_dir, meta, records.TRAIN_SPLIT),
                                    max_seq_length, plan.effective_batch_size, seed=FLAGS.seed,
                                    length_buckets=length_buckets)
    try:
      stats = train(model, dataset, optimizer, FLAGS.model_dir, steps, plan.effective_batch_size,
                    FLAGS.save_checkpoints_steps, FLAGS.init_checkpoint, plan.accumulation_steps,
                    jit_compile=xla, float32_weight_gradients=FLAGS.float32_weight_gradients)
    except OutOfMemoryError as e:
      raise OutOfMemoryError(f"{e}\n" + memory.diagnosis(
          config, max_seq_length, plan.micro_batch_size, policy, device, plan.accumulation_steps,
          headline="out of memory")) from None
    stats.update(train_batch_size=plan.micro_batch_size,
                 gradient_accumulation_steps=plan.accumulation_steps,
                 effective_batch_size=plan.effective_batch_size, xla=bool(xla),
                 length_buckets=list(length_buckets or []))
    _write_json(os.path.join(FLAGS.model_dir, "train_results.json"), stats)
  else:
    latest = tf.train.latest_checkpoint(FLAGS.model_dir)
    if latest:
      tf.train.Checkpoint(model=model).read(latest).expect_partial()
      logging.info("predicting with %s", latest)
    elif FLAGS.init_checkpoint:
      logging.info("predicting with %s", checkpoints.initialize_from(model, FLAGS.init_checkpoint))
    else:
      raise UsageError(f"--do_train=false needs a checkpoint in --model_dir={FLAGS.model_dir} "
                       f"or an --init_checkpoint")
  if not FLAGS.do_predict:
    return None
  predict_file = FLAGS.predict_file or definitions.default_squad_file(
      definitions.PREDICT_FILE_NAMES)
  if not os.path.exists(predict_file):
    raise UsageError(definitions.missing_squad_file_message("predict_file", predict_file))
  version_2 = FLAGS.version_2_with_negative or meta["flags"].get("version_2_with_negative", False)
  results = evaluate(model, FLAGS.records_dir, meta, predict_file, FLAGS.model_dir,
                     FLAGS.predict_batch_size, FLAGS.n_best_size, FLAGS.max_answer_length,
                     FLAGS.max_eval_examples, version_2, FLAGS.null_score_diff_threshold)
  if version_2:
    print(f"SQuAD v2.0 on {results['total']} questions of {predict_file}: "
          f"exact = {results['exact']:.2f}, f1 = {results['f1']:.2f}; " +
          ", ".join(f"{k} = {results[k]:.2f}" for k in (
              "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "best_exact",
              "best_exact_thresh", "best_f1", "best_f1_thresh") if k in results))
  else:
    print(f"SQuAD v1.1 on {results['num_questions']} questions of {predict_file}: "
          f"exact_match = {results['exact_match']:.2f}, f1 = {results['f1']:.2f}")
  return results


def main(argv):
  del argv
  try:
    run()
  except (memory.MemoryPlanError, OutOfMemoryError) as e:  # multi-line diagnoses: print once
    sys.exit(f"train.py: {e}")
  except (UsageError, FileNotFoundError, squad_reader.SquadInputError, FloatingPointError,
          checkpoints.CheckpointError) as e:
    sys.exit(f"train.py: {e}")


if __name__ == "__main__":
  app.run(main)
