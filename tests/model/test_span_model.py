"""model/span_model.py's exact GELU: the erf form equals TensorFlow's erfc form within float32
rounding, and both equal the float64 definition."""

import numpy as np
import tensorflow as tf

from squad_qa.model import span_model


def test_exact_gelu_equals_the_definition_and_tensorflows_form():
  x = tf.concat([tf.linspace(-12.0, 12.0, 4801), tf.random.stateless_normal([4096], [1, 2]) * 3], 0)
  got = span_model.gelu_exact(x).numpy()
  xd = x.numpy().astype(np.float64)
  definition = 0.5 * xd * tf.math.erfc(-xd / np.sqrt(2.0)).numpy()
  np.testing.assert_allclose(got, definition, rtol=0, atol=2e-6)
  np.testing.assert_allclose(got, tf.nn.gelu(x, approximate=False).numpy(), rtol=0, atol=2e-6)
  # x Phi(x), Phi the standard normal CDF, at known points.
  np.testing.assert_allclose(
      span_model.gelu_exact(tf.constant([-1.0, 0.0, 1.0, 2.0])).numpy(),
      [-0.15865525393145707, 0.0, 0.8413447460685429, 1.9544997361036416], rtol=1e-6)
  small = tf.constant([-3.0, -2.5, 0.5, 2.0], tf.bfloat16)  # 16-bit: TensorFlow's erfc form
  np.testing.assert_array_equal(
      span_model.gelu_exact(small).numpy(),
      tf.nn.gelu(small, approximate=False).numpy())
