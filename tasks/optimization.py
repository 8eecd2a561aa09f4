"""AdamW on a linear warm-up and decay schedule that reaches its peak, and the distributed update.

  lr(s) = learning_rate * s / W                      for s < W
  lr(s) = learning_rate * (N - s) / (N - W)          for W <= s <= N, 0 after

with W = int(N * warmup_proportion), as google-research/bert counts it. tfm's and
google-research/bert's `create_optimizer` decay from step 0, so their peak is lr * (1 - W/N)
(tensorflow/models PR #9709). Update s + 1 uses lr(s), so the first uses 0 when W > 0, as theirs.
N is a variable (`LinearWarmupDecay.num_train_steps`): --train_budget sets it once it has measured
the step, after the step is traced, and a --model_dir checkpoint saves it.
"""

import tensorflow as tf
import tf_keras
from official.modeling.optimization import legacy_adamw

WEIGHT_DECAY_RATE = 0.01  # google-research/bert and tfm
GRADIENT_CLIP_NORM = 1.0  # global norm, google-research/bert and tfm
EXCLUDE_FROM_WEIGHT_DECAY = ["LayerNorm", "layer_norm", "bias"]


class LinearWarmupDecay(tf_keras.optimizers.schedules.LearningRateSchedule):
  """The schedule of the module docstring; float32 rates.

  Attributes:
    num_train_steps: int64 tf.Variable N, read at each call (so a traced step follows a new value).
    learning_rate, warmup_proportion: float64 tf.Variables of the peak rate and W / N, fixed; a
      --model_dir checkpoint saves them so that a resume can refuse other values.
  """

  def __init__(self, learning_rate, num_train_steps, warmup_proportion):
    super().__init__()
    self.num_train_steps = tf.Variable(num_train_steps, dtype=tf.int64, trainable=False,
                                       name="num_train_steps")
    self.learning_rate = tf.Variable(learning_rate, dtype=tf.float64, trainable=False,
                                     name="learning_rate")
    self.warmup_proportion = tf.Variable(warmup_proportion, dtype=tf.float64, trainable=False,
                                         name="warmup_proportion")

  def warmup_steps(self):
    """W as an int64 tensor: int(N * warmup_proportion), the Python rule in float64."""
    return tf.cast(tf.floor(tf.cast(self.num_train_steps, tf.float64) * self.warmup_proportion),
                   tf.int64)

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    peak = tf.cast(self.learning_rate, tf.float32)
    total = tf.cast(self.num_train_steps, tf.float32)
    warmup = tf.cast(self.warmup_steps(), tf.float32)
    rising = tf.math.divide_no_nan(peak * step, warmup)
    falling = peak * tf.math.divide_no_nan(total - tf.minimum(step, total),
                                           tf.maximum(total - warmup, 1.0))
    return tf.where(step < warmup, rising, falling)

  def set_num_train_steps(self, num_train_steps):
    """Sets N (cross-replica context); W follows."""
    self.num_train_steps.assign(num_train_steps)

  def get_config(self):
    return {
        "learning_rate": float(self.learning_rate.numpy()),
        "num_train_steps": int(self.num_train_steps.numpy()),
        "warmup_proportion": float(self.warmup_proportion.numpy())
    }


@tf.function(jit_compile=True, reduce_retracing=True)
def _decay_weights(var, learning_rate, weight_decay_rate):
  """var -= learning_rate * var * weight_decay_rate (tfm's decay, in its order of operations) as
  one XLA function, in place; returns learning_rate * weight_decay_rate (float32 [])."""
  var.assign_sub(learning_rate * var * weight_decay_rate)
  return learning_rate * weight_decay_rate


class AdamWeightDecay(legacy_adamw.AdamWeightDecay):
  """tfm's AdamWeightDecay with its weight decay (`_decay_weights_op`) as one XLA function per
  weight: one pass over the weight in place, where TensorFlow's ops take three, and copy a
  weight a gather has left copy-on-read (the word embeddings) twice more. The same slots, config
  and checkpoints. Clipping and updating MiniLM-L6's 22.6M weights, the word embeddings
  copy-on-read: 34.2-34.7 ms instead of 40.8-41.2 (Zen 4, 2 cores)."""

  def _decay_weights_op(self, var, learning_rate, apply_state):
    if not self._do_use_weight_decay(var.name):
      return tf.no_op()
    weight_decay_rate = apply_state[(var.device, var.dtype.base_dtype)]["weight_decay_rate"]
    return _decay_weights(var, learning_rate, weight_decay_rate)


def learning_rate_schedule(learning_rate, num_train_steps, warmup_proportion):
  """A `LinearWarmupDecay`; create it under the strategy's scope (its variables)."""
  return LinearWarmupDecay(learning_rate, num_train_steps, warmup_proportion)


def schedule_of(optimizer):
  """The `LinearWarmupDecay` of an optimizer of `create_optimizer` (loss-scaled or not)."""
  return getattr(optimizer, "inner_optimizer", optimizer).learning_rate


def create_optimizer(learning_rate, num_train_steps, warmup_proportion, loss_scale):
  """`AdamWeightDecay` on a `LinearWarmupDecay` (call it under the strategy's scope); with
  dynamic loss scaling when `loss_scale` (mixed_float16). It does not clip (tfm's would clip per
  replica): `apply_gradients` does.

  Returns:
    A tf_keras (legacy) optimizer; with `loss_scale` a `tf_keras.mixed_precision.
    LossScaleOptimizer` with dynamic loss scaling around it.
  """
  optimizer = AdamWeightDecay(
      learning_rate=learning_rate_schedule(learning_rate, num_train_steps, warmup_proportion),
      weight_decay_rate=WEIGHT_DECAY_RATE, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
      exclude_from_weight_decay=EXCLUDE_FROM_WEIGHT_DECAY, gradient_clip_norm=0.0)
  if loss_scale:
    optimizer = tf_keras.mixed_precision.LossScaleOptimizer(optimizer, dynamic=True)
  return optimizer


def create_slots(optimizer, variables):
  """Creates the optimizer's slots for `variables` now (call under the strategy's scope), as the
  first update would, so that a checkpoint of the initial state holds them (zeros)."""
  getattr(optimizer, "inner_optimizer", optimizer)._create_all_weights(variables)  # pylint: disable=protected-access


def apply_gradients(optimizer, gradients, variables):
  """One optimizer update from this replica's share of the gradients (replica context).

  The replicas' gradients are summed, clipped to global norm GRADIENT_CLIP_NORM and applied
  without aggregating again: one device's update on the whole global batch.

  tf.IndexedSlices (the word embeddings') are made dense first: clip_by_global_norm would count a
  token occurring k times as k rows, not their sum; and IndexedSlices all-gather in two
  collectives that orbit's loop can pair across steps ("Shape mismatch in the collective
  instance"). docs/distribution.md weighs the [vocab_size, hidden] all-reduce this costs.
  """
  context = tf.distribute.get_replica_context()
  gradients = [tf.convert_to_tensor(g) for g in gradients]
  gradients = context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)
  gradients, _ = tf.clip_by_global_norm(gradients, GRADIENT_CLIP_NORM)
  return optimizer.apply_gradients(zip(gradients, variables),
                                   experimental_aggregate_gradients=False)


def learning_rate_at(optimizer, step=None):
  """The float learning rate at `step` (default: the next update's)."""
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  schedule = inner.learning_rate
  step = inner.iterations if step is None else step
  return float(schedule(step)) if callable(schedule) else float(schedule)
