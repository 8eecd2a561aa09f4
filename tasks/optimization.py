"""AdamW with google-research/bert's schedule reaching its peak, and the distributed update.

The schedule: the rate rises linearly from 0 at step 0 to exactly `learning_rate` at
step `warmup_steps`, then falls linearly to 0 at step `num_train_steps`:

  lr(s) = learning_rate * s / W                      for s < W
  lr(s) = learning_rate * (N - s) / (N - W)          for W <= s <= N

Built from tf-models-official's own classes: `official.modeling.optimization.lr_schedule.
LinearWarmup` (warm-up to the decay's value at W) around `PolynomialDecayWithOffset` (a Keras
PolynomialDecay evaluated at s - W, power 1, end 0, decay_steps N - W). tfm's
`official.nlp.optimization.create_optimizer` and google-research/bert's `optimization.py` instead
decay from step 0 (PolynomialDecay over N) and warm up to that decayed value, so their peak is
lr * (1 - W/N) (80 % with W = N/2; tensorflow/models PR #9709). The optimizer's update number
s + 1 uses lr(s) (Keras reads the schedule at `iterations` before incrementing it), so the first
update uses 0 when W > 0, as in both references.
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
  (mixed_float16; mixed_bfloat16 and float32 need none).

  Gradient clipping is not left to the optimizer (tfm's clips per replica before the all-reduce,
  and not at all inside a LossScaleOptimizer): `apply_gradients` here clips the summed gradient.

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

  The replicas' gradients are summed (each replica's loss is already divided by the global
  batch), the sum is clipped to global norm GRADIENT_CLIP_NORM, and the optimizer applies it
  without aggregating again. So the update equals one device's update on the whole global batch
  (a non-finite sum skips the step under loss scaling, on every replica). Outside a strategy the
  all-reduce is the identity.

  A tf.IndexedSlices gradient (the word embeddings': one row per token of the batch, a token id
  once per occurrence) is made dense first, for two reasons:
  - the clipping norm: tf.clip_by_global_norm takes an IndexedSlices' norm over its rows as
    given, so a token that occurs k times contributes k squared rows instead of the square of
    their sum. Dense, the norm is the gradient's, and one pass, k accumulated passes (whose sum
    is dense) and any number of replicas clip alike.
  - several replicas: TensorFlow all-gathers IndexedSlices in two collectives, the first of which
    (the row counts) depends only on the input batch; inside orbit's tf.while_loop a replica can
    launch it for the next step while another is still in this one, and the collectives of two
    steps are then paired: "Shape mismatch in the collective instance" as soon as two steps have
    different batch widths, even when all replicas of each step agree. A dense gradient is
    all-reduced with the others, after this step's backward pass.
  The cost is a [vocab_size, hidden] all-reduce per step (94 MB for BERT-base in float32;
  docs/distribution.md "Training on several replicas" weighs it); AdamW updates every row of the
  embedding's slots either way. On one device a MiniLM step took the same time dense as with the
  rows as given, or with them summed per token, to the noise of the measurement (±5 %).
  """
  context = tf.distribute.get_replica_context()
  gradients = [tf.convert_to_tensor(g) for g in gradients]
  gradients = context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)
  gradients, _ = tf.clip_by_global_norm(gradients, GRADIENT_CLIP_NORM)
  return optimizer.apply_gradients(zip(gradients, variables),
                                   experimental_aggregate_gradients=False)


def learning_rate_at(optimizer, step=None):
  """The float learning rate the next update uses
  (at `step`, default the optimizer's iterations)."""
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  schedule = inner.learning_rate
  step = inner.iterations if step is None else step
  return float(schedule(step)) if callable(schedule) else float(schedule)
