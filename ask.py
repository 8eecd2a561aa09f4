r"""Answers one question with a SavedModel written by export.py.

  python ask.py --export_dir=export --question="Who won?" --context="The Broncos won the game."

Tokenizes and windows the question and passage in Python exactly as preprocessing does (vocab and
settings come from the SavedModel), calls its `serve_features` signature, and decodes the best span
over all windows (postprocess/span_decoding.py). Prints the answer and its character offsets.
"""

import json
import os
import sys

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from flags import definitions
from postprocess import span_decoding
from preprocess import features as features_lib
from preprocess import wordpiece

definitions.define_export_flags()
definitions.define_ask_flags()
definitions.define_train_flags()  # n_best_size, max_answer_length, predict_batch_size
FLAGS = flags.FLAGS


class SavedModelQA:
  """Question answering with an exported SavedModel and Python-side tokenization.

  Args:
    export_dir: folder written by export.py.
  """

  def __init__(self, export_dir):
    self._loaded = tf.saved_model.load(export_dir)
    self._serve = self._loaded.signatures["serve_features"]
    with open(os.path.join(export_dir, "assets.extra", "qa_config.json")) as f:
      self.config = json.load(f)
    self.tokenizer = wordpiece.WordPieceTokenizer(
        self._loaded.vocab_file.asset_path.numpy().decode(), self.config["do_lower_case"])

  def answer(self, question, context, n_best_size=20, max_answer_length=30):
    """The best answer span (span_decoding.Answer; text == context[start_char:end_char])."""
    query, passage = self.tokenizer.tokenize([question, context])
    features = features_lib.make_features(
        0, 0, query.ids, passage, self.tokenizer.cls_id, self.tokenizer.sep_id,
        self.config["max_seq_length"], self.config["doc_stride"], self.config["max_query_length"])
    if not features:
      return span_decoding.Answer("", 0, 0, float("-inf"))
    outputs = self._serve(
        input_word_ids=tf.constant([f.input_ids for f in features], tf.int32),
        input_mask=tf.constant([f.input_mask for f in features], tf.int32),
        input_type_ids=tf.constant([f.segment_ids for f in features], tf.int32))
    start_logits = outputs["start_logits"].numpy()
    end_logits = outputs["end_logits"].numpy()
    windows = [span_decoding.WindowLogits(
        start_logits[i], end_logits[i], np.array(f.token_start_char), np.array(f.token_end_char),
        np.array(f.token_is_max_context)) for i, f in enumerate(features)]
    return span_decoding.decode_answer(windows, context, n_best_size, max_answer_length)


def main(argv):
  del argv
  context = FLAGS.context
  if FLAGS.context_file:
    with open(FLAGS.context_file, encoding="utf-8") as f:
      context = f.read()
  if FLAGS.question is None or context is None:
    sys.exit("ask.py: give --question and --context (or --context_file)")
  answer = SavedModelQA(FLAGS.export_dir).answer(
      FLAGS.question, context, FLAGS.n_best_size, FLAGS.max_answer_length)
  print(f"Q: {FLAGS.question}")
  print(f"A: {answer.text!r} (characters {answer.start_char}..{answer.end_char}, "
        f"score {answer.score:.2f})")


if __name__ == "__main__":
  app.run(main)
