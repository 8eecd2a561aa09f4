"""The SQuAD span task, shaped like tfm's `QuestionAnsweringTask` with a `QATaskConfig`: model,
inputs, loss, optimizer and the train step with gradient accumulation (`make_replica_step`).
Under any tf.distribute strategy a step equals one device's step on the same global batch.
"""

import dataclasses
from typing import Optional

import tensorflow as tf
import tf_keras

from squad_qa import errors
from squad_qa.base import commands
from squad_qa.model import dropout
from squad_qa.model import float32_gradients
from squad_qa.model import precision
from squad_qa.model import span_model
from squad_qa.model import xla_elementwise
from squad_qa.preprocess import records
from squad_qa.tasks import optimization
from squad_qa.tasks import train_config


class InputError(errors.UserError, ValueError):
  """Training input that cannot be built as asked (one-line message with the fix)."""


def set_precision_policy(mixed_precision_dtype):
  """Sets the global tf_keras (tfm's Keras, not Keras 3) policy for "float32", "float16" or
  "bfloat16"; returns the policy's name.

  Raises:
    errors.UsageError: another dtype.
  """
  if mixed_precision_dtype not in precision.POLICIES:
    raise errors.UsageError(f"mixed_precision_dtype {mixed_precision_dtype!r}: expected one of "
                            f"{', '.join(precision.POLICIES)}")
  policy = precision.POLICIES[mixed_precision_dtype]
  tf_keras.mixed_precision.set_global_policy(policy)
  return policy


# Logit given to padding positions in the loss: exp(-1e9 - max) is exactly 0 in float32.
_PADDING_LOGIT = -1e9


def span_loss(start_positions, end_positions, start_logits, end_logits, global_batch_size=None,
              input_mask=None):
  """run_squad.py's (CE(start) + CE(end)) / 2, summed over the examples given and divided by
  the global batch (`tf.nn.compute_average_loss`).

  Args:
    start_positions, end_positions: int [batch] token indices.
    start_logits, end_logits: [batch, seq] logits (cast to float32 here).
    global_batch_size: examples the mean is over; default: those given times the replicas.
    input_mask: optional int [batch, seq]: the softmax covers mask-1 positions only, so padding
      does not change the loss (run_squad.py's covers it).

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

  With `accumulation_steps` = k > 1 the batch is cut, in order, into k micro-batches run one at a
  time (parallel_iterations=1), their float32 gradients summed. Each pass divides by the whole
  global batch, so rows see one big batch's scale (under float16 a later 1/k would change the
  rounding). With a float16 model and `float32_weight_gradients`, weight gradients are reduced in
  float32 (model/float32_gradients.py) via tf.gradients: call the function in a tf.function.

  Returns:
    A function batch -> (float32 scalar loss, list of float32 gradients; the word-embedding
    gradient is tf.IndexedSlices when k == 1). `batch` holds int32 [k * b, seq]
    input_word_ids, input_mask, input_type_ids and int32 [k * b] start_positions,
    end_positions; seq may differ from batch to batch.

  Raises:
    float32_gradients.OverrideError: at trace time, if the float32 override misses a weight.
  """
  loss_scaled = isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer)
  variables = trained_variables(model)
  float16 = float32_weight_gradients and computes_in_float16(model)

  def loss_and_gradients(batch, global_batch_size=None):
    if float16:
      with float32_gradients.override_weight_gradients(), xla_elementwise.training():
        start_logits, end_logits = model(span_model.model_inputs(batch), training=True)
      loss = span_loss(batch["start_positions"], batch["end_positions"], start_logits, end_logits,
                       global_batch_size, batch["input_mask"])
      scaled = optimizer.get_scaled_loss(loss) if loss_scaled else loss
      grads = float32_gradients.traced_gradients(scaled, variables)
    else:
      with tf.GradientTape() as tape, xla_elementwise.training():
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
    accumulation_steps: micro-batches per step (`make_gradient_fn`).
    jit_compile: XLA for the forward and backward passes (once per batch shape); the all-reduce
      and the update run outside XLA.
    float32_weight_gradients: under float16, reduce weight gradients in float32
      (`make_gradient_fn`); False keeps float16's (accumulation then matches one batch to
      float16 rounding only).
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
  """`make_replica_step` as a tf.function outside any strategy (tests, benchmarks); returns the
  unscaled float32 loss."""
  return tf.function(
      make_replica_step(model, optimizer, accumulation_steps, jit_compile,
                        float32_weight_gradients), reduce_retracing=True)


@dataclasses.dataclass
class QATaskConfig:
  """What the task needs (defaults: train.py's, on one replica).

  Attributes:
    bert_config: a `model.bert_config.BertConfig`.
    max_seq_length: tokens per feature of the records.
    train_files: the train shards (every worker reads them all).
    per_replica_batch_size, accumulation_steps: features per pass, passes per optimizer step.
    learning_rate, num_train_steps, warmup_proportion: the schedule (tasks/optimization.py).
    mixed_precision_dtype: the compute dtype the model was built under; "float16" loss-scales.
    jit_compile, float32_weight_gradients: as `make_replica_step`'s.
    seed: the input's shuffling seed (the same on every worker).
    length_buckets: padded lengths in tokens, or None.
    xla_elementwise: the train step runs the layer norms, GELU and dropout under XLA
      (model/xla_elementwise.py); False keeps TensorFlow's ops (side-by-side benchmarks).
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
  xla_elementwise: bool = True


class QuestionAnsweringTask:
  """SQuAD span prediction as a task: build the model, inputs, loss, optimizer and the step."""

  def __init__(self, config: QATaskConfig):
    self.config = config

  def build_model(self):
    """The span model; call it under the strategy's scope. Its dropout masks are hashes under
    keys (model/dropout.py) drawn from tf.random.Generator variables (switched on for the
    process), which checkpoints save. Its layer norms, GELU and dropout run under XLA in the train
    step (model/xla_elementwise.py) unless `xla_elementwise` is False."""
    tf_keras.backend.experimental.enable_tf_random_generator()
    model, _ = span_model.build_span_model(self.config.bert_config)
    dropout.use_generator_dropout(model)
    if self.config.xla_elementwise:
      xla_elementwise.use_xla_elementwise(model)
    return model

  def create_optimizer(self):
    """tasks/optimization.py's AdamW on the schedule; call it under the strategy's scope."""
    c = self.config
    return optimization.create_optimizer(c.learning_rate, c.num_train_steps, c.warmup_proportion,
                                         loss_scale=c.mixed_precision_dtype == "float16")

  @property
  def replica_batch_size(self):
    """Features a replica takes per optimizer step."""
    return self.config.per_replica_batch_size * self.config.accumulation_steps

  def build_inputs(self, input_context=None, skip_steps=0):
    """This input pipeline's endless training batches (a `dataset_fn` for the strategy).

    Every pipeline (one per worker) builds the same seeded global batches and takes its replicas'
    consecutive rows of each, one batch per replica: every replica of a step pads to the step's
    width, and N replicas train the same model as one device.

    Args:
      input_context: a `tf.distribute.InputContext` (None: one pipeline, one replica).
      skip_steps: optimizer steps already trained, whose batches a resume skips.

    Returns:
      A tf.data.Dataset of records.train_dataset's batch dicts, `replica_batch_size` rows each.

    Raises:
      InputError: several input pipelines without a seed.
    """
    pipelines = input_context.num_input_pipelines if input_context else 1
    index = input_context.input_pipeline_id if input_context else 0
    replicas = input_context.num_replicas_in_sync if input_context else 1
    replicas_here = replicas // pipelines
    if pipelines > 1 and self.config.seed is None:
      raise InputError(f"{pipelines} input pipelines (workers) need a shuffling seed to draw the "
                       f"same global batches; set QATaskConfig.seed "
                       f"({commands.command('squad-qa-train')}: --seed)")
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
