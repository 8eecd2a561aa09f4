"""preprocess/features.py's windowing as TensorFlow ops, for a batch of raw questions and contexts.

For every question, `make_windows` returns exactly the windows of `features.make_features` (same
inputs, context offsets and max-context flags, same order): google-research/bert run_squad.py's
algorithm, with the max-context rule computed for all tokens at once by segment max/min over each
token's copies. Vectorized over the batch: all questions' windows are concatenated, with
`example_index` saying whose each is, and only as wide as the longest one's real tokens.
"""

from typing import NamedTuple

import tensorflow as tf


class Windows(NamedTuple):
  """All windows of a batch of questions, W of them, each of S positions.

  S is the real length of the longest window, at most max_seq_length (1 without windows).

  Attributes:
    input_word_ids, input_mask, input_type_ids: int32 [W, S] model inputs.
    example_index: int32 [W], the batch row of each window (non-decreasing).
    token_start, token_end: int64 [W, S] context offsets of each position's token, in the units
      given to `make_windows`, end exclusive; -1 outside the context.
    token_is_max_context: bool [W, S], where this window is the token's max-context window.
  """
  input_word_ids: tf.Tensor
  input_mask: tf.Tensor
  input_type_ids: tf.Tensor
  example_index: tf.Tensor
  token_start: tf.Tensor
  token_end: tf.Tensor
  token_is_max_context: tf.Tensor


def _padded_flat_values(ragged, pad_value):
  """flat_values with one `pad_value` appended: a gather target even when all rows are empty."""
  flat = ragged.flat_values
  return tf.concat([flat, tf.constant([pad_value], flat.dtype)], axis=0)


class _Layout(NamedTuple):
  """Where the parts of W windows sit: int32 [W, 1] columns against positions `t` [1, S]."""
  example_index: tf.Tensor  # [W]
  t: tf.Tensor
  win_start: tf.Tensor  # index of the window's first token among its context's
  win_len: tf.Tensor  # context tokens in the window
  q_len: tf.Tensor  # question tokens kept
  window_length: tf.Tensor  # real positions

  def column(self, x):
    """[B] per question -> [W, 1] per window."""
    return tf.gather(x, self.example_index)[:, None]


def _layout(query_ids, context_ids, doc_stride, max_seq_length):
  """The `_Layout` of the windows of truncated `query_ids` and `context_ids` (RaggedTensors)."""
  batch_size = tf.shape(query_ids.row_splits, out_type=tf.int32)[0] - 1
  query_len = tf.cast(query_ids.row_lengths(), tf.int32)
  num_tokens = tf.cast(context_ids.row_lengths(), tf.int32)
  max_doc = max_seq_length - query_len - 3
  step = tf.minimum(max_doc, doc_stride)
  num_windows = tf.where(num_tokens > 0,
                         (tf.maximum(num_tokens - max_doc, 0) + step - 1) // step + 1, 0)
  example_index = tf.repeat(tf.range(batch_size), num_windows)
  window_in_example = tf.ragged.range(num_windows).flat_values
  column = lambda x: tf.gather(x, example_index)[:, None]
  win_start = window_in_example[:, None] * column(step)
  win_len = tf.minimum(column(num_tokens) - win_start, column(max_doc))
  q_len = column(query_len)
  window_length = q_len + win_len + 3
  width = tf.reduce_max(tf.concat([tf.reshape(window_length, [-1]), [1]], axis=0))
  return _Layout(example_index, tf.range(width)[None, :], win_start, win_len, q_len, window_length)


def _max_context(layout, is_context, token_index, num_segments):
  """bool [W, S]: whether each position's window is its token's max-context window.

  Scores each copy of a token as run_squad.py does (min(left, right) + 0.01 * window length, in
  float64), then per token the best score and the first window reaching it.
  """
  t, win_len = layout.t, layout.win_len
  left = t - (layout.q_len + 2)
  right = win_len - 1 - left
  score = (tf.cast(tf.minimum(left, right), tf.float64) +
           0.01 * tf.cast(tf.broadcast_to(win_len, tf.shape(left)), tf.float64))
  score = tf.where(is_context, score, tf.constant(-1.0, tf.float64))
  best_score = tf.math.unsorted_segment_max(score, token_index, num_segments)
  is_best = is_context & tf.equal(score, tf.gather(best_score, token_index))
  num_all_windows = tf.shape(layout.example_index)[0]
  window_id = tf.broadcast_to(tf.range(num_all_windows)[:, None], tf.shape(t + layout.win_start))
  first_best = tf.math.unsorted_segment_min(tf.where(is_best, window_id, tf.int32.max), token_index,
                                            num_segments)
  return is_best & tf.equal(window_id, tf.gather(first_best, token_index))


def make_windows(query_ids, context_ids, context_starts, context_ends, cls_id, sep_id,
                 featurization):
  """`Windows` of a batch of tokenized questions and contexts, as preprocess/features.py makes them.

  Args:
    query_ids: int32 RaggedTensor [B, (question tokens)], untruncated.
    context_ids: int32 RaggedTensor [B, (context tokens)].
    context_starts, context_ends: int64 RaggedTensors like `context_ids`, token offsets.
    cls_id, sep_id: Python ints, ids of [CLS] and [SEP].
    featurization: a `preprocess.features.Featurization` with max_seq_length >
      max_query_length + 3 and doc_stride > 0.
  """
  query_ids = query_ids[:, :featurization.max_query_length]
  layout = _layout(query_ids, context_ids, featurization.doc_stride, featurization.max_seq_length)
  t, win_len, q_len = layout.t, layout.win_len, layout.q_len
  doc_offset = q_len + 2
  is_query = (t >= 1) & (t <= q_len)
  is_context = (t >= doc_offset) & (t < doc_offset + win_len)
  is_sep = (t == q_len + 1) | (t == doc_offset + win_len)

  query_flat = _padded_flat_values(query_ids, 0)
  query_pad = tf.shape(query_flat)[0] - 1
  query_rows = tf.cast(query_ids.row_splits[:-1], tf.int32)
  query_index = tf.where(is_query, layout.column(query_rows) + t - 1, query_pad)

  context_flat = _padded_flat_values(context_ids, 0)
  total_tokens = tf.shape(context_flat)[0] - 1
  context_rows = tf.cast(context_ids.row_splits[:-1], tf.int32)
  # Among all the batch's context tokens; outside the context the pad slot, a spare segment id.
  token_index = tf.where(is_context,
                         layout.column(context_rows) + layout.win_start + t - doc_offset,
                         total_tokens)

  input_word_ids = tf.where(
      t == 0, cls_id,
      tf.where(
          is_query, tf.gather(query_flat, query_index),
          tf.where(is_sep, sep_id, tf.where(is_context, tf.gather(context_flat, token_index), 0))))
  input_mask = tf.cast(t < layout.window_length, tf.int32)
  input_type_ids = tf.cast(is_context | (t == doc_offset + win_len), tf.int32)
  token_start = tf.where(is_context, tf.gather(_padded_flat_values(context_starts, -1),
                                               token_index), tf.constant(-1, tf.int64))
  token_end = tf.where(is_context, tf.gather(_padded_flat_values(context_ends, -1), token_index),
                       tf.constant(-1, tf.int64))
  token_is_max_context = _max_context(layout, is_context, token_index, total_tokens + 1)
  return Windows(input_word_ids, input_mask, input_type_ids, layout.example_index, token_start,
                 token_end, token_is_max_context)
