"""Dropout masks drawn as 16-bit integers from each layer's own tf.random.Generator: half the
random bits of tf_keras's float32 uniforms and no float conversion, the same generator state (so
checkpoints and resumes are unchanged), and a drop rate within 2^-17 of the one asked for."""

from absl import logging
import tensorflow as tf

MASK_BITS = 16


def drop_threshold(rate):
  """The 16-bit draws below which an entry is dropped: round(rate * 2^16), so the drop rate is
  threshold / 2^16, within 2^-17 of `rate` (0.1 -> 6554, 0.100006).

  Raises:
    ValueError: `rate` is not in [0, 1).
  """
  if not 0 <= rate < 1:
    raise ValueError(f"dropout rate {rate} is not in [0, 1)")
  return round(rate * 2**MASK_BITS)


def draws(generator, inputs):
  """uint16, the shape of `inputs`: one uniform 16-bit draw per entry from `generator` (a
  tf.random.Generator; one uint32 draw serves two entries)."""
  size = tf.size(inputs)
  bits = generator.uniform_full_int([(size + 1) // 2], tf.uint32)
  return tf.reshape(tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size], tf.shape(inputs))


def keep_mask(generator, inputs, rate):
  """bool, the shape of `inputs`: True where an entry is kept, its `draws` at least
  `drop_threshold(rate)`."""
  return draws(generator, inputs) >= tf.constant(drop_threshold(rate), tf.uint16)


def generator_dropout(generator):
  """A tf_keras `RandomGenerator.dropout(inputs, rate, noise_shape=None)` drawing from
  `generator` (a tf.random.Generator): each entry of `inputs` (any shape and float dtype) is
  kept, times 1 / (1 - rate), where `keep_mask` is True, else 0. A `noise_shape` (unused by the
  BERT layers) falls back to tf.nn.experimental.general_dropout on the same generator. The
  function's `keep_mask(inputs, rate)` draws a mask alone and its `draws(inputs)` the 16-bit draws
  alone, for a caller that applies them elsewhere."""

  def dropout(inputs, rate, noise_shape=None):
    if noise_shape is not None:
      return tf.nn.experimental.general_dropout(inputs, rate=rate, noise_shape=noise_shape,
                                                uniform_sampler=generator.uniform)
    keep = keep_mask(generator, inputs, rate)
    return inputs * (tf.cast(keep, inputs.dtype) * tf.constant(1 / (1 - rate), inputs.dtype))

  dropout.keep_mask = lambda inputs, rate: keep_mask(generator, inputs, rate)
  dropout.draws = lambda inputs: draws(generator, inputs)
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
