"""benchmarks/train_throughput.py: the warm-up batches cut or padded to each bucket length."""

import numpy as np
import tensorflow as tf

from benchmarks import train_throughput


def test_at_length_cuts_or_pads_the_tokens_and_keeps_the_answers_inside():
  batch = {
      "input_word_ids": tf.constant([[101, 7, 8, 102, 9, 102], [101, 5, 102, 6, 102, 0]]),
      "input_mask": tf.constant([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]]),
      "input_type_ids": tf.constant([[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 0]]),
      "start_positions": tf.constant([4, 1]),
      "end_positions": tf.constant([5, 3]),
  }
  cut = train_throughput.at_length(tf, batch, 4)
  assert cut["input_word_ids"].numpy().tolist() == [[101, 7, 8, 102], [101, 5, 102, 6]]
  assert cut["input_type_ids"].numpy().tolist() == [[0, 0, 0, 0], [0, 0, 0, 1]]
  assert cut["start_positions"].numpy().tolist() == [3, 1]
  assert cut["end_positions"].numpy().tolist() == [3, 3]
  padded = train_throughput.at_length(tf, batch, 8)
  np.testing.assert_array_equal(padded["input_mask"].numpy(),
                                [[1, 1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0]])
  assert padded["start_positions"].numpy().tolist() == [4, 1]


def test_the_padded_row_is_named_for_the_records_length():
  names = [name for name, *_ in train_throughput.ours_configurations(128, xla=False)]
  assert names == [
      "ours, length buckets", "ours, 64-token buckets (the --xla default)", "ours, padded to 128"
  ]
  with_xla = train_throughput.ours_configurations(384, xla=True)
  assert [row[0] for row in with_xla][2:] == ["ours, padded to 384", "ours, length buckets, XLA"]
  assert [row[1:] for row in with_xla] == [("auto", False, True), ("xla", False, True),
                                           ("none", False, False), ("xla", True, True)]
