"""preprocess/features.py's windowing as TensorFlow ops, for a batch of raw questions and contexts.

The contract: for every question, `make_windows` returns exactly the windows
`features.make_features` makes (same input ids, mask, segment ids, context offsets and max-context
flags, same order), so a SavedModel that windows in its graph sees what the model was trained and
evaluated on. The algorithm is google-research/bert run_squad.py's (`convert_examples_to_features`,
`_check_is_max_context`):

  * the question keeps its first `max_query_length` tokens (q of them);
  * windows hold at most `max_doc = max_seq_length - q - 3` context tokens; window j starts at
    token j * min(max_doc, doc_stride), and the last one is the first that reaches the end, so a
    context of n > 0 tokens has ceil(max(n - max_doc, 0) / step) + 1 windows and an empty one none;
  * `[CLS] question [SEP] window [SEP]`, zero-padded; segment ids 1 on `window [SEP]`;
  * a token's max-context window maximizes min(left, right) + 0.01 * window length, first window
    on ties. Computed here for all tokens at once with segment max/min over the token's copies
    instead of run_squad.py's loop, in float64 with the same expression, so ties fall the same way.

Everything is vectorized over the batch: the windows of all questions are concatenated, with
`example_index` saying whose each is. The windows are only as wide as the longest of them (its real
tokens, at most max_seq_length): the features' positions beyond it are padding (mask 0) in every
window, so they are left out instead of computed and thrown away.
"""

from typing import NamedTuple

import tensorflow as tf


class Windows(NamedTuple):
  """All windows of a batch of questions, W of them, each of S positions.

  S is the real length (`sum(input_mask)`) of the longest window, at most max_seq_length (1 when
  there is no window); a window's positions are those of preprocess/features.py's feature cut to S.

  Attributes:
    input_word_ids, input_mask, input_type_ids: int32 [W, S] model inputs.
    example_index: int32 [W], the batch row each window belongs to (non-decreasing).
    token_start, token_end: int64 [W, S] offsets of each position's token in the context, in the
      units of the offsets given to `make_windows` (code points in serving), end exclusive; -1 at
      positions outside the context window.
    token_is_max_context: bool [W, S], True where this window is the token's max-context window.
  """
  input_word_ids: tf.Tensor
  input_mask: tf.Tensor
  input_type_ids: tf.Tensor
  example_index: tf.Tensor
  token_start: tf.Tensor
  token_end: tf.Tensor
  token_is_max_context: tf.Tensor


def _padded_flat_values(ragged, pad_value):
  """flat_values with one `pad_value` appended: a safe gather target even when all rows are
  empty."""
  flat = ragged.flat_values
  return tf.concat([flat, tf.constant([pad_value], flat.dtype)], axis=0)


def make_windows(query_ids, context_ids, context_starts, context_ends, cls_id, sep_id,
                 max_seq_length, doc_stride, max_query_length):
  """Windows of a batch of tokenized questions and contexts, as preprocess/features.py makes them.

  Args:
    query_ids: int32 RaggedTensor [B, (question tokens)], untruncated.
    context_ids: int32 RaggedTensor [B, (context tokens)].
    context_starts, context_ends: int64 RaggedTensors shaped like `context_ids`: each context
      token's offsets (any unit; end exclusive).
    cls_id, sep_id: Python ints, ids of [CLS] and [SEP].
    max_seq_length, doc_stride, max_query_length: Python ints, in tokens; the caller guarantees
      max_seq_length > max_query_length + 3 and doc_stride > 0 (make_records.py checks the same).

  Returns:
    A `Windows` tuple.
  """
  query_ids = query_ids[:, :max_query_length]
  batch_size = tf.shape(query_ids.row_splits, out_type=tf.int32)[0] - 1
  query_len = tf.cast(query_ids.row_lengths(), tf.int32)
  num_tokens = tf.cast(context_ids.row_lengths(), tf.int32)
  max_doc = max_seq_length - query_len - 3
  step = tf.minimum(max_doc, doc_stride)
  num_windows = tf.where(num_tokens > 0,
                         (tf.maximum(num_tokens - max_doc, 0) + step - 1) // step + 1, 0)

  # One row per window; [W, 1] columns broadcast against positions t in [1, S].
  example_index = tf.repeat(tf.range(batch_size), num_windows)
  window_in_example = tf.ragged.range(num_windows).flat_values
  num_all_windows = tf.shape(example_index)[0]
  column = lambda x: tf.gather(x, example_index)[:, None]
  win_start = window_in_example[:, None] * column(step)
  win_len = tf.minimum(column(num_tokens) - win_start, column(max_doc))
  q_len = column(query_len)
  # [W, 1] real positions of each window; S (>= 1) the longest.
  window_length = q_len + win_len + 3
  width = tf.reduce_max(tf.concat([tf.reshape(window_length, [-1]), [1]], axis=0))
  t = tf.range(width)[None, :]

  doc_offset = q_len + 2
  is_query = (t >= 1) & (t <= q_len)
  is_context = (t >= doc_offset) & (t < doc_offset + win_len)
  is_sep = (t == q_len + 1) | (t == doc_offset + win_len)
  context_token = win_start + t - doc_offset  # index among the context's tokens

  query_flat = _padded_flat_values(query_ids, 0)
  query_pad = tf.shape(query_flat)[0] - 1
  query_rows = tf.cast(query_ids.row_splits[:-1], tf.int32)
  query_index = tf.where(is_query, column(query_rows) + t - 1, query_pad)

  context_flat = _padded_flat_values(context_ids, 0)
  total_tokens = tf.shape(context_flat)[0] - 1
  context_rows = tf.cast(context_ids.row_splits[:-1], tf.int32)
  # Index of the position's token among all contexts' tokens of the batch; total_tokens (the pad
  # slot) outside the context, which also serves as a spare segment id below.
  token_index = tf.where(is_context, column(context_rows) + context_token, total_tokens)

  input_word_ids = tf.where(
      t == 0, cls_id,
      tf.where(
          is_query, tf.gather(query_flat, query_index),
          tf.where(is_sep, sep_id, tf.where(is_context, tf.gather(context_flat, token_index), 0))))
  input_mask = tf.cast(t < window_length, tf.int32)
  input_type_ids = tf.cast(is_context | (t == doc_offset + win_len), tf.int32)
  token_start = tf.where(is_context, tf.gather(_padded_flat_values(context_starts, -1),
                                               token_index), tf.constant(-1, tf.int64))
  token_end = tf.where(is_context, tf.gather(_padded_flat_values(context_ends, -1), token_index),
                       tf.constant(-1, tf.int64))

  # Max context: score of each token copy (one per window holding it), then per token the best
  # score and the first window reaching it. run_squad.py: min(left, right) + 0.01 * length.
  left = t - doc_offset
  right = win_len - 1 - left
  score = (tf.cast(tf.minimum(left, right), tf.float64) +
           0.01 * tf.cast(tf.broadcast_to(win_len, tf.shape(left)), tf.float64))
  score = tf.where(is_context, score, tf.constant(-1.0, tf.float64))
  num_segments = total_tokens + 1
  best_score = tf.math.unsorted_segment_max(score, token_index, num_segments)
  is_best = is_context & tf.equal(score, tf.gather(best_score, token_index))
  window_id = tf.broadcast_to(tf.range(num_all_windows)[:, None], tf.shape(t + win_start))
  first_best = tf.math.unsorted_segment_min(tf.where(is_best, window_id, tf.int32.max), token_index,
                                            num_segments)
  token_is_max_context = is_best & tf.equal(window_id, tf.gather(first_best, token_index))

  return Windows(input_word_ids, input_mask, input_type_ids, example_index, token_start, token_end,
                 token_is_max_context)
