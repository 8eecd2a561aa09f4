"""AdamW on a linear warm-up and decay schedule that reaches its peak, and the distributed update.

  lr(s) = learning_rate * s / W                      for s < W
  lr(s) = learning_rate * (N - s) / (N - W)          for W <= s <= N

from tfm's `lr_schedule.LinearWarmup` around `PolynomialDecayWithOffset`. tfm's and
google-research/bert's `create_optimizer` decay from step 0, so their peak is lr * (1 - W/N)
(tensorflow/models PR #9709). Update s + 1 uses lr(s), so the first uses 0 when W > 0, as theirs.
"""

import tensorflow as tf
import tf_keras
from official.modeling.optimization import legacy_adamw
from official.modeling.optimization import lr_schedule

WEIGHT_DECAY_RATE = 0.01  # google-research/bert and tfm
GRADIENT_CLIP_NORM = 1.0  # global norm, google-research/bert and tfm
EXCLUDE_FROM_WEIGHT_DECAY = ["LayerNorm", "layer_norm", "bias"]


def learning_rate_schedule(learning_rate, num_train_steps, warmup_steps):
  """The schedule of the module docstring, as a tf_keras LearningRateSchedule (float32 rate)."""
  decay = lr_schedule.PolynomialDecayWithOffset(initial_learning_rate=learning_rate,
                                                decay_steps=max(1, num_train_steps - warmup_steps),
                                                end_learning_rate=0.0, power=1.0,
                                                offset=warmup_steps)
  if not warmup_steps:
    return decay
  return lr_schedule.LinearWarmup(after_warmup_lr_sched=decay, warmup_steps=warmup_steps,
                                  warmup_learning_rate=0.0)


def warmup_steps_for(num_train_steps, warmup_proportion):
  """Warm-up steps: int(num_train_steps * warmup_proportion), as google-research/bert."""
  return int(num_train_steps * warmup_proportion)


def create_optimizer(learning_rate, num_train_steps, warmup_proportion, loss_scale):
  """tfm's AdamWeightDecay on `learning_rate_schedule`; with dynamic loss scaling when `loss_scale`
  (mixed_float16). It does not clip (tfm's would clip per replica): `apply_gradients` does.

  Returns:
    A tf_keras (legacy) optimizer; with `loss_scale` a `tf_keras.mixed_precision.
    LossScaleOptimizer` with dynamic loss scaling around it.
  """
  optimizer = legacy_adamw.AdamWeightDecay(
      learning_rate=learning_rate_schedule(learning_rate, num_train_steps,
                                           warmup_steps_for(num_train_steps, warmup_proportion)),
      weight_decay_rate=WEIGHT_DECAY_RATE, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
      exclude_from_weight_decay=EXCLUDE_FROM_WEIGHT_DECAY, gradient_clip_norm=0.0)
  if loss_scale:
    optimizer = tf_keras.mixed_precision.LossScaleOptimizer(optimizer, dynamic=True)
  return optimizer


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
