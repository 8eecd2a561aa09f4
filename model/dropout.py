"""Dropout masks from a keyed hash of each entry's index, one key per call drawn from the layer's
own tf.random.Generator.

TensorFlow's Philox kernel, which tf_keras's dropout draws from, runs far below memory speed on the
CPU: ~9 ms a layer for the attention dropout's draws of a training step at [16, 12, 190, 190] on a
2-core Zen 4, more than its softmax and mask together (docs/benchmarks.md "Dropout masks"). Here
a call draws one key (two uint32) from the generator, so the generator's state, which checkpoints
save, still decides every mask and a resume repeats it; each entry's 32-bit draw is a hash of its
flat index under that key. That is a few integer operations per entry that XLA fuses into the pass
applying the mask (model/xla_elementwise.py), and that a gradient recomputes rather than keeping
the mask.

The hash is C. Wellons' lowbias32 ("Prospecting for Hash Functions", 2018: a bijection of uint32
with an avalanche bias of 0.17) applied twice, the key's first word xor'd into the index before
the first round and its second added before the second. Every step is a bijection of uint32, so
the entries of one call draw distinct values; the drop rate is within 2^-33 of the one asked for.
"""

from absl import logging
import tensorflow as tf

DRAW_BITS = 32
# lowbias32's multipliers (Wellons 2018).
_LOWBIAS32_MULTIPLIERS = (0x7feb352d, 0x846ca68b)


def drop_threshold(rate):
  """The uint32 draws below which an entry is dropped: round(rate * 2^32) (at most 2^32 - 1), so
  the drop rate is threshold / 2^32, within 2^-33 of `rate` (0.1 -> 429496730).

  Raises:
    ValueError: `rate` is not in [0, 1).
  """
  if not 0 <= rate < 1:
    raise ValueError(f"dropout rate {rate} is not in [0, 1)")
  return min(round(rate * 2**DRAW_BITS), 2**DRAW_BITS - 1)


def _lowbias32(x):
  first, second = _LOWBIAS32_MULTIPLIERS
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16)) * tf.constant(first, tf.uint32)
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 15)) * tf.constant(second, tf.uint32)
  return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))


def hashed_draws(key, shape):
  """uint32 of `shape` (at most 2^31 - 1 entries): each entry's draw, the module's hash of its
  flat (row-major) index under `key` (uint32 [2]). The same key and shape give the same draws
  with TensorFlow's ops and under XLA."""
  size = tf.reduce_prod(shape)
  index = tf.bitcast(tf.range(size, dtype=tf.int32), tf.uint32)  # XLA has no uint32 range
  first = _lowbias32(tf.bitwise.bitwise_xor(index, key[0]))
  return tf.reshape(_lowbias32(first + key[1]), shape)


def keep_mask(key, shape, rate):
  """bool of `shape`: True where an entry is kept, its `hashed_draws` at least
  `drop_threshold(rate)`."""
  return hashed_draws(key, shape) >= tf.constant(drop_threshold(rate), tf.uint32)


def call_key(generator):
  """uint32 [2]: one call's key, drawn from `generator` (a tf.random.Generator; advances it)."""
  return generator.uniform_full_int([2], tf.uint32)


def generator_dropout(generator):
  """A tf_keras `RandomGenerator.dropout(inputs, rate, noise_shape=None)` drawing from
  `generator` (a tf.random.Generator): each entry of `inputs` (any shape and float dtype) is
  kept, times 1 / (1 - rate) in their dtype, where `keep_mask` under a key from `call_key` is
  True, else 0. A `noise_shape` (unused by the BERT layers) falls back to
  tf.nn.experimental.general_dropout on the same generator. The function's `key()` draws a call's
  key alone, for a caller that applies the mask elsewhere."""

  def dropout(inputs, rate, noise_shape=None):
    if noise_shape is not None:
      return tf.nn.experimental.general_dropout(inputs, rate=rate, noise_shape=noise_shape,
                                                uniform_sampler=generator.uniform)
    keep = keep_mask(call_key(generator), tf.shape(inputs), rate)
    return inputs * (tf.cast(keep, inputs.dtype) * tf.constant(1 / (1 - rate), inputs.dtype))

  dropout.key = lambda: call_key(generator)
  return dropout


def use_generator_dropout(model):
  """Switches every dropout layer of `model` whose tf_keras `RandomGenerator` draws from a
  tf.random.Generator (after `tf_keras.backend.experimental.enable_tf_random_generator()`) to
  `generator_dropout`. Reads the private `_random_generator._generator` (BUILD.md lists it).

  Returns:
    How many layers were switched; 0 is logged as a warning (correct, only slower).
  """
  switched = 0
  for layer in model.submodules:
    random_generator = getattr(layer, "_random_generator", None)
    generator = getattr(random_generator, "_generator", None)
    if isinstance(generator, tf.random.Generator):
      random_generator.dropout = generator_dropout(generator)
      switched += 1
  if not switched:
    logging.warning(
        "No dropout layer of %s draws from a tf.random.Generator: tf_keras's own "
        "dropout stays.", model.name)
  return switched
