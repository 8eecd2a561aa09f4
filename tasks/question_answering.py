"""The SQuAD span task: model, inputs, loss, optimizer, and the train step with gradient
accumulation, built (`make_replica_step`) and run (`QATrainer`) here.

Shaped like tf-models-official's `official.nlp.tasks.question_answering.QuestionAnsweringTask`
(`build_model`, `build_inputs`, `train_step`, `create_optimizer`), without its
config machinery: a `QATaskConfig` dataclass holds the settings, so the task is usable from Python
without defining flags. Works under any `tf.distribute` strategy: the input is a
`dataset_fn(input_context)` for `strategy.distribute_datasets_from_function`, each replica's loss
is its examples' loss sum divided by the global batch (`tf.nn.compute_average_loss`), and the
summed, clipped gradient is applied once (tasks/optimization.py), so a step equals one device's
step on the same global batch.
"""

import dataclasses
import math
import time
from typing import Optional

import orbit
import tensorflow as tf
import tf_keras

from squad_qa import errors
from squad_qa.model import float32_gradients
from squad_qa.model import span_model
from squad_qa.preprocess import records
from squad_qa.tasks import optimization
from squad_qa.tasks import train_config


class InputError(errors.UserError, ValueError):
  """Training input that cannot be built as asked (one-line message with the fix)."""


# --mixed_precision_dtype (tfm's runtime.mixed_precision_dtype) -> the tf_keras dtype policy.
PRECISION_POLICIES = {
    "float32": "float32",
    "float16": "mixed_float16",
    "bfloat16": "mixed_bfloat16"
}


def set_precision_policy(mixed_precision_dtype):
  """Sets the global tf_keras policy for a compute dtype and returns the policy's name.

  Args:
    mixed_precision_dtype: "float32", "float16" (mixed_float16: float16 compute, float32
      variables, trained with dynamic loss scaling) or "bfloat16" (mixed_bfloat16: bfloat16
      compute, float32 variables, no loss scaling: bfloat16 has float32's exponent range).

  tfm's models are tf_keras (Keras 2) models, so the policy must be set through tf_keras, not
  Keras 3.

  Raises:
    ValueError: another dtype.
  """
  if mixed_precision_dtype not in PRECISION_POLICIES:
    raise errors.UsageError(f"mixed_precision_dtype {mixed_precision_dtype!r}: expected one of "
                            f"{', '.join(PRECISION_POLICIES)}")
  policy = PRECISION_POLICIES[mixed_precision_dtype]
  tf_keras.mixed_precision.set_global_policy(policy)
  return policy


# Logit given to padding positions in the loss: exp(-1e9 - max) is exactly 0 in float32.
_PADDING_LOGIT = -1e9


def span_loss(start_positions, end_positions, start_logits, end_logits, global_batch_size=None,
              input_mask=None):
  """(CE(start) + CE(end)) / 2 summed over the examples given, divided by the global batch.

  run_squad.py's loss with `tf.nn.compute_average_loss` semantics: on one device without
  `global_batch_size` it is the batch mean; on a replica (or a micro-batch) it is that part's
  share of the mean over the global batch, so the shares add up to the global mean.

  Args:
    start_positions, end_positions: int [batch] token indices.
    start_logits, end_logits: [batch, seq] logits (cast to float32 here).
    global_batch_size: the number of examples the mean is over; default: the examples given times
      the replicas in sync.
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
  end = tf_keras.losses.sparse_categorical_crossentropy(end_positions, end_logits, from_logits=True)
  return tf.nn.compute_average_loss((start + end) / 2.0, global_batch_size=global_batch_size)


def trained_variables(model):
  """The model's trainable variables minus BERT's pooler, which the span head does not use."""
  return [v for v in model.trainable_variables if "pooler_transform" not in v.name]


def computes_in_float16(model):
  """Whether any layer of `model` computes in float16 (a mixed_float16 policy)."""
  return any(
      getattr(layer, "compute_dtype", None) == "float16"
      for layer in [model] + list(model.submodules))


def make_gradient_fn(model, optimizer, accumulation_steps=1, float32_weight_gradients=True):
  """(loss, gradients) of this replica's share of the global batch's mean span loss.

  With `accumulation_steps` = k > 1 the replica's batch of k * b features is cut, in order, into
  k micro-batches of b; each runs forward and backward alone (a while loop with
  parallel_iterations=1, so one micro-batch's activations are alive at a time) and the float32
  gradients are added. Each pass's loss is its examples' loss sum divided by the whole global
  batch's k * b * replicas (not its mean times 1/k), so the sum of the passes is the replica's
  share of the batch mean and the gradient entering every row's backward pass is the same number
  in both, scale / (k * b * replicas) * dCE: under float16 even a factor 1/k applied afterwards
  would change which small activation gradients round into float16 subnormals. The result is the
  whole batch's gradient up to float32 summation order.

  Under loss scaling every pass uses the same scale (it only changes in apply_gradients) and its
  gradients are unscaled in float32 before they are added; an overflow in any pass makes the sum
  non-finite, so the step is skipped and the scale lowered exactly as for one big batch.

  When the model computes in float16 (mixed_float16) and `float32_weight_gradients` is on, every
  reduction over the batch * seq rows into a weight gradient is computed in float32 from the
  float16 operands (model/float32_gradients.py), so k passes of b give one batch of k * b within
  float32 tolerance here too (on TF's CPU kernels; XLA and GPU kernels may pick shape-dependent
  algorithms: see docs/training.md). That path uses tf.gradients (the tape cannot take gradient
  overrides), so the returned function must run inside a tf.function; it raises
  float32_gradients.OverrideError at trace time if the override misses a weight. float32 models,
  and float16 ones with `float32_weight_gradients` off, use a GradientTape.

  Returns:
    A function batch -> (float32 scalar loss, list of float32 gradients; the word-embedding
    gradient is tf.IndexedSlices when k == 1). `batch` holds int32 [k * b, seq]
    input_word_ids, input_mask, input_type_ids and int32 [k * b] start_positions,
    end_positions; seq may differ from batch to batch.
  """
  loss_scaled = isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer)
  variables = trained_variables(model)
  float16 = float32_weight_gradients and computes_in_float16(model)

  def loss_and_gradients(batch, global_batch_size=None):
    if float16:
      with float32_gradients.override_weight_gradients():
        start_logits, end_logits = model(span_model.model_inputs(batch), training=True)
      loss = span_loss(batch["start_positions"], batch["end_positions"], start_logits, end_logits,
                       global_batch_size, batch["input_mask"])
      scaled = optimizer.get_scaled_loss(loss) if loss_scaled else loss
      grads = float32_gradients.traced_gradients(scaled, variables)
    else:
      with tf.GradientTape() as tape:
        start_logits, end_logits = model(span_model.model_inputs(batch), training=True)
        loss = span_loss(batch["start_positions"], batch["end_positions"], start_logits, end_logits,
                         global_batch_size, batch["input_mask"])
        scaled = optimizer.get_scaled_loss(loss) if loss_scaled else loss
      grads = tape.gradient(scaled, variables)
    if loss_scaled:
      grads = optimizer.get_unscaled_gradients(grads)
    return loss, grads

  if accumulation_steps == 1:
    return loss_and_gradients

  def accumulated(batch):
    k = accumulation_steps
    micro = {
        key: tf.reshape(value, tf.concat([[k, -1], tf.shape(value)[1:]], axis=0))
        for key, value in batch.items()
    }
    replicas = tf.distribute.get_replica_context().num_replicas_in_sync
    global_batch_size = tf.shape(batch["start_positions"])[0] * replicas

    def body(i, loss_sum, grad_sums):
      loss, grads = loss_and_gradients({
          key: value[i] for key, value in micro.items()
      }, global_batch_size)
      return (i + 1, loss_sum + loss,
              [total + tf.convert_to_tensor(grad) for total, grad in zip(grad_sums, grads)])

    zeros = [tf.zeros(v.shape, tf.float32) for v in variables]
    _, loss_sum, grad_sums = tf.while_loop(lambda i, *_: i < k, body,
                                           (tf.constant(0), tf.constant(0.0), zeros),
                                           parallel_iterations=1)
    return loss_sum, grad_sums

  return accumulated


def make_replica_step(model, optimizer, accumulation_steps=1, jit_compile=False,
                      float32_weight_gradients=True):
  """One optimizer step on this replica's batch (replica context); returns its float32 loss share.

  Args:
    accumulation_steps: micro-batches per step (see `make_gradient_fn`); the replica's batch holds
      accumulation_steps * micro-batch features.
    jit_compile: compile the forward and backward passes (and the accumulation loop) with XLA,
      once per distinct batch shape; the all-reduce and the optimizer update run outside XLA.
    float32_weight_gradients: under a float16 policy, reduce weight gradients in float32 (see
      `make_gradient_fn`); False keeps the ops' own float16 gradients (faster on GPUs without
      TF32; accumulation then matches one big batch to float16 rounding only).
  """
  gradient_fn = make_gradient_fn(model, optimizer, accumulation_steps, float32_weight_gradients)
  if jit_compile:
    gradient_fn = tf.function(gradient_fn, jit_compile=True, reduce_retracing=True)
  variables = trained_variables(model)

  def replica_step(batch):
    loss, grads = gradient_fn(batch)
    optimization.apply_gradients(optimizer, grads, variables)
    return loss

  return replica_step


def make_train_step(model, optimizer, accumulation_steps=1, jit_compile=False,
                    float32_weight_gradients=True):
  """A tf.function running one optimizer step on a batch outside any strategy (tests, benchmarks).

  Same arguments as `make_replica_step`; returns the (unscaled) float32 loss. The input
  signature leaves batch and sequence length open, so length-bucketed batches trace once.
  """
  return tf.function(
      make_replica_step(model, optimizer, accumulation_steps, jit_compile,
                        float32_weight_gradients), reduce_retracing=True)


@dataclasses.dataclass
class QATaskConfig:
  """What the task needs; train.py fills it from its `TrainConfig`, tests and notebooks directly
(the defaults are train.py's, on one replica).

  Attributes:
    bert_config: a `model.bert_config.BertConfig`.
    max_seq_length: tokens per feature of the records.
    train_files: the train shards written by make_records.py (every worker reads them all).
    per_replica_batch_size: features per forward/backward pass on one replica.
    accumulation_steps: passes per optimizer step; a replica's batch is their product.
    learning_rate, num_train_steps, warmup_proportion: the schedule (tasks/optimization.py).
    mixed_precision_dtype: the compute dtype the model was built under (`set_precision_policy`);
      "float16" trains with dynamic loss scaling.
    jit_compile: XLA for the gradient computation.
    float32_weight_gradients: see `make_gradient_fn`.
    seed: shuffling seed of the input (the same on every worker).
    length_buckets: padded lengths of length-bucketed batches (records.length_bucket_boundaries),
      or None: every batch padded to max_seq_length.
  """
  bert_config: object
  max_seq_length: int
  train_files: tuple = ()
  per_replica_batch_size: int = train_config.TrainConfig.train_batch_size
  accumulation_steps: int = train_config.TrainConfig.gradient_accumulation_steps
  learning_rate: float = train_config.TrainConfig.learning_rate
  num_train_steps: int = 1
  warmup_proportion: float = train_config.TrainConfig.warmup_proportion
  mixed_precision_dtype: str = "float32"
  jit_compile: bool = False
  float32_weight_gradients: bool = train_config.TrainConfig.float32_weight_gradients
  seed: Optional[int] = None
  length_buckets: Optional[tuple] = None


class QuestionAnsweringTask:
  """SQuAD span prediction as a task: build the model, inputs, loss, optimizer and the step."""

  def __init__(self, config: QATaskConfig):
    self.config = config

  def build_model(self):
    """The span model (model/span_model.py); call it under the strategy's scope.

    Its dropout layers draw from tf.random.Generator states (tf_keras' "stateful" random
    generator, switched on here for the process) instead of TensorFlow's legacy random ops,
    whose state lives inside the op kernels: `model_dir.dropout_generators(model)` are variables
    that model_dir.make_checkpoint saves, so a resumed run draws the dropout masks an uninterrupted
    run would. Under a tf.distribute strategy each replica draws its own stream.
    """
    tf_keras.backend.experimental.enable_tf_random_generator()
    model, _ = span_model.build_span_model(self.config.bert_config)
    return model

  def create_optimizer(self):
    """tasks/optimization.py's AdamW on the schedule; call it under the strategy's scope."""
    c = self.config
    return optimization.create_optimizer(c.learning_rate, c.num_train_steps, c.warmup_proportion,
                                         loss_scale=c.mixed_precision_dtype == "float16")

  @property
  def replica_batch_size(self):
    """Features a replica takes per optimizer step: per_replica_batch_size * accumulation_steps."""
    return self.config.per_replica_batch_size * self.config.accumulation_steps

  def build_inputs(self, input_context=None, skip_steps=0):
    """This input pipeline's endless training batches (a `dataset_fn` for the strategy).

    Every input pipeline (one per worker) reads all train shards in the same seeded order and
    builds the same global batches, `records.train_dataset` at the global batch size
    (`replica_batch_size` * replicas); pipeline i takes rows [i * s, (i + 1) * s) of each, s =
    replica_batch_size * its replicas, and yields them as one batch per replica, in replica order.
    So every replica of a step gets a batch of the step's width (none pads more than one device
    would, none waits for a wider one), and the global batches are those of one device at that
    batch size: a run on N replicas trains the same model as on one. Each worker reads all
    records for that (SQuAD v1.1 train at 384: 131 MB, about a second a pass).

    Args:
      input_context: a `tf.distribute.InputContext` (None: one pipeline, one replica).
      skip_steps: optimizer steps already trained; their batches are skipped, so a resumed run
        continues the data order of an uninterrupted one (the pipeline is deterministic for a
        given seed).

    Returns:
      A tf.data.Dataset of records.train_dataset's batch dicts, `replica_batch_size` rows each.

    Raises:
      InputError: several input pipelines without a seed (they would draw different batches).
    """
    pipelines = input_context.num_input_pipelines if input_context else 1
    index = input_context.input_pipeline_id if input_context else 0
    replicas = input_context.num_replicas_in_sync if input_context else 1
    replicas_here = replicas // pipelines
    if pipelines > 1 and self.config.seed is None:
      raise InputError(f"{pipelines} input pipelines (workers) need a shuffling seed to draw the "
                       f"same global batches; set QATaskConfig.seed (train.py: --seed)")
    dataset = records.train_dataset(paths=list(self.config.train_files),
                                    max_seq_length=self.config.max_seq_length,
                                    batch_size=self.replica_batch_size * replicas,
                                    seed=self.config.seed,
                                    length_buckets=self.config.length_buckets)
    if replicas > 1:
      share, first = self.replica_batch_size, index * replicas_here * self.replica_batch_size

      def this_pipelines_rows(batch):
        return {
            k: tf.reshape(
                v[first:first + replicas_here * share],
                tf.concat([[replicas_here, share], tf.shape(v)[1:]],
                          axis=0)) for k, v in batch.items()
        }

      dataset = dataset.map(this_pipelines_rows).unbatch()
    if skip_steps:
      dataset = dataset.skip(skip_steps * replicas_here)
    return dataset

  def replica_step(self, model, optimizer):
    """The per-replica train step (`make_replica_step`) with this task's settings."""
    c = self.config
    return make_replica_step(model, optimizer, c.accumulation_steps, c.jit_compile,
                             c.float32_weight_gradients)


class LossNotFiniteError(errors.UserError, FloatingPointError):
  """The training loss became NaN or infinite (the message names the step and the fix)."""


class QATrainer(orbit.StandardTrainer):
  """Runs the task's replica step under a strategy and reports loss, learning rate and rates.

  Args:
    strategy: the tf.distribute strategy the model and optimizer were built under.
    replica_step: batch -> float32 loss share (tasks.question_answering.make_replica_step).
    optimizer: the task's optimizer (its `iterations` is the global step).
    global_batch_size: features per optimizer step over all replicas (for examples/s).
  """

  def __init__(self, strategy, replica_step, optimizer, global_batch_size):
    self.strategy = strategy
    self.optimizer = optimizer
    self.global_batch_size = global_batch_size
    self._replica_step = replica_step
    # Outside the strategy's scope: a plain (not per-replica) metric of the all-reduced loss.
    self.train_loss = tf_keras.metrics.Mean("loss", dtype=tf.float32)
    self._loop_started = None
    self._loop_start_step = 0
    self._loops = 0  # loops run in this process
    self.last_output = {}  # train_loop_end's figures of the last loop
    # The dataset is set after the controller has restored the step (see `train`).
    super().__init__(train_dataset=None,
                     options=orbit.StandardTrainerOptions(use_tf_while_loop=True))

  def train_loop_begin(self):
    self.train_loss.reset_state()
    self._loop_started = time.time()
    self._loop_start_step = int(self.optimizer.iterations.numpy())

  def train_step(self, iterator):
    loss = self.strategy.run(self._replica_step, args=(next(iterator),))
    self.train_loss.update_state(self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None))

  def train_loop_end(self):
    loss = float(self.train_loss.result())
    step = int(self.optimizer.iterations.numpy())
    if not math.isfinite(loss):
      raise LossNotFiniteError(f"loss is {loss} at step {step}; lower --learning_rate")
    elapsed = time.time() - self._loop_started
    steps = step - self._loop_start_step
    self.last_output = {
        "loss": loss,
        "learning_rate": optimization.learning_rate_at(self.optimizer, step - 1)
    }
    # A process's first loop includes tracing: its rate would measure mostly that.
    if elapsed and self._loops:
      self.last_output["examples_per_second"] = steps * self.global_batch_size / elapsed
    self._loops += 1
    return self.last_output
