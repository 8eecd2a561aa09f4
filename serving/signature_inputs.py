"""In-graph checks of the serving signatures' inputs: a wrong shape gets one line naming the input.

A signature function does not check the shapes it is fed (from Python or TensorFlow Serving), so
serving/module.py declares its inputs with unknown rank and checks them here at run time; a failed
check raises tf.errors.InvalidArgumentError, whose message TF Serving returns.
"""

import tensorflow as tf

# Well-shaped bodies of TF Serving's REST predict API, row and columnar. Unquoted: the Assert op
# C-escapes the strings it reports.
TEXT_REST_BODIES = ("{instances: [{question: ..., context: ...}]} or "
                    "{inputs: {question: [...], context: [...]}}")
FEATURES_REST_BODIES = ("{instances: [{input_word_ids: [...], input_mask: [...], "
                        "input_type_ids: [...]}]} or {inputs: {input_word_ids: [[...]], "
                        "input_mask: [[...]], input_type_ids: [[...]]}}")
EXAMPLES_REST_BODIES = "{instances: [{b64: ...}]} or {inputs: {examples: [{b64: ...}]}}"


def _shape_text(tensor):
  """The tensor's dynamic shape as a string tensor, e.g. "[1, 2]" ("[]" for a scalar)."""
  dims = tf.strings.reduce_join(tf.strings.as_string(tf.shape(tensor)), separator=", ")
  return tf.strings.join(["[", dims, "]"])


def require_rank(tensor, rank, signature, name, expected, rest_bodies):
  """Checks at run time that `tensor` has rank `rank`; returns it with static shape [None] * rank.

  The message is "<signature>: `<name>` must be <expected>; got rank <r>, shape [<dims>] (a REST
  body sends <rest_bodies>)" (`rest_bodies`: one of the *_REST_BODIES).

  Raises:
    tf.errors.InvalidArgumentError: when the graph runs, on another rank.
  """
  actual = tf.rank(tensor)
  message = tf.strings.join([
      f"{signature}: `{name}` must be {expected}; got rank ",
      tf.strings.as_string(actual), ", shape ",
      _shape_text(tensor), f" (a REST body sends {rest_bodies})"
  ])
  check = tf.debugging.Assert(tf.equal(actual, rank), [message])
  # Everything computed from the input waits for the check, so a wrong shape fails here first.
  with tf.control_dependencies([check]):
    checked = tf.identity(tensor)
  # Static only: tf.ensure_shape's own run-time check might run before this one.
  checked.set_shape([None] * rank)
  return checked


def require_same_shape(tensors, signature, expected):
  """Checks at run time that the dict {input name: tensor} holds one shape; returns the dict.

  The message is "<signature>: `a`, `b` and `c` must have one shape <expected>; got [..], [..]".

  Raises:
    tf.errors.InvalidArgumentError: when the graph runs, on different shapes.
  """
  names = [f"`{name}`" for name in tensors]
  listed = f"{', '.join(names[:-1])} and {names[-1]}"
  shapes = [tf.shape(t) for t in tensors.values()]
  same = tf.reduce_all([tf.reduce_all(tf.equal(shapes[0], s)) for s in shapes[1:]])
  got = tf.strings.reduce_join([_shape_text(t) for t in tensors.values()], separator=", ")
  message = tf.strings.join([f"{signature}: {listed} must have one shape {expected}; got ", got])
  check = tf.debugging.Assert(same, [message])
  with tf.control_dependencies([check]):
    return {name: tf.identity(t) for name, t in tensors.items()}


def require_values_below(tensor, limit, signature, name, meaning):
  """Checks at run time that int `tensor`'s values are in [0, `limit`); returns it. An embedding
  gathers a wrong word id with an error, but tfm's type embedding takes a one-hot of the type ids
  (an id out of range reads zeros) and the mask only multiplies: wrong values give quiet,
  plausible logits.

  The message is "<signature>: `<name>` holds <meaning>, in [0, <limit>); got values <min>..<max>".

  Raises:
    tf.errors.InvalidArgumentError: when the graph runs, on a value out of range.
  """
  low, high = tf.reduce_min(tensor), tf.reduce_max(tensor)  # no values: int max, int min
  message = tf.strings.format(
      f"{signature}: `{name}` holds {meaning}, in [0, {limit}); got "
      f"values {{}}..{{}}", (low, high))
  check = tf.debugging.Assert((low >= 0) & (high < limit), [message])
  with tf.control_dependencies([check]):
    return tf.identity(tensor)
