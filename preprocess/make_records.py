r"""SQuAD JSON -> sharded TFRecords of windowed WordPiece features, plus meta.json.

  python preprocess/make_records.py --vocab_file=vocab.txt --max_seq_length=384 \
      --output_dir=records [--train_file=...] [--predict_file=...]

Without --train_file/--predict_file both splits are made from $SQUAD_DIR (default data/squad). Each
paragraph is tokenized once, in batches, by tensorflow-text; windows follow google-research/bert
run_squad.py (see preprocess/features.py). Shards are written under temporary names and renamed, with
meta.json last, only when every shard is complete.
"""

import collections
import json
import os
import sys
import time

# `python preprocess/make_records.py` puts preprocess/ first on sys.path; the project's packages
# live one level up (also reachable through `pip install -e .`).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
import tensorflow as tf

from flags import definitions
from preprocess import features as features_lib
from preprocess import records
from preprocess import squad_reader
from preprocess import wordpiece

definitions.define_squad_file_flags()
definitions.define_tokenizer_flags()
definitions.define_featurization_flags()
FLAGS = flags.FLAGS

FIRST_UNIQUE_ID = 1000000000  # as in run_squad.py / squad_lib.py


class _ShardWriter:
  """Writes one split's shards under temporary names; `commit` renames them into place."""

  def __init__(self, output_dir, split, num_shards):
    self.names = [records.shard_name(split, i, num_shards) for i in range(num_shards)]
    self._final = [os.path.join(output_dir, n) for n in self.names]
    self._temp = [os.path.join(output_dir, f".{n}.tmp-{os.getpid()}") for n in self.names]
    self._writers = [tf.io.TFRecordWriter(p) for p in self._temp]

  def write(self, shard, data):
    self._writers[shard].write(data)

  def close(self):
    for w in self._writers:
      w.close()

  def commit(self):
    for temp, final in zip(self._temp, self._final):
      tf.io.gfile.rename(temp, final, overwrite=True)

  def abort(self):
    self.close()
    for temp in self._temp:
      if tf.io.gfile.exists(temp):
        tf.io.gfile.remove(temp)


def featurize_split(squad, tokenizer, split, writer, num_shards, max_seq_length, doc_stride,
                    max_query_length):
  """Tokenizes one SQuAD file and writes its features into `writer`'s shards.

  Questions are sharded contiguously (question i goes to shard i * num_shards // num_questions), so
  reading the eval shards in order gives the features in question order.

  Returns:
    (num_examples, num_features, skipped): questions and features written, and a Counter of
    skipped questions by reason.
  """
  is_training = split == records.TRAIN_SPLIT
  started = time.time()
  context_tokens = tokenizer.tokenize(squad.contexts)
  question_tokens = tokenizer.tokenize([e.question_text for e in squad.examples])
  answer_tokens = (tokenizer.tokenize([e.answer_text for e in squad.examples])
                   if is_training else [None] * len(squad.examples))
  logging.info("%s: tokenized %d paragraphs and %d questions in %.1f s", split,
               len(squad.contexts), len(squad.examples), time.time() - started)

  char_to_word = {}  # paragraph index -> per-character word index, built once per paragraph
  skipped = collections.Counter()
  num_features = 0
  unique_id = FIRST_UNIQUE_ID
  num_examples = max(len(squad.examples), 1)
  last_log = time.time()
  for index, example in enumerate(squad.examples):
    tokens = context_tokens[example.paragraph_index]
    answer_span = None
    if is_training:
      if example.paragraph_index not in char_to_word:
        char_to_word = {example.paragraph_index: squad_reader.char_to_word_offsets(
            squad.contexts[example.paragraph_index])[1]}
      answer_span = features_lib.answer_token_span(
          tokens, char_to_word[example.paragraph_index], example.answer_start,
          example.answer_text, answer_tokens[index].ids)
      if answer_span is None:
        skipped["answer_has_no_tokens"] += 1
        continue
    window_features = features_lib.make_features(
        index, unique_id, question_tokens[index].ids, tokens, tokenizer.cls_id, tokenizer.sep_id,
        max_seq_length, doc_stride, max_query_length, answer_span)
    if not window_features:
      skipped["context_has_no_tokens"] += 1
      continue
    shard = index * num_shards // num_examples
    for feature in window_features:
      writer.write(shard, records.serialize_feature(feature, split))
    unique_id += len(window_features)
    num_features += len(window_features)
    if time.time() - last_log > 10:
      last_log = time.time()
      rate = (index + 1) / (last_log - started)
      logging.info("%s: %d/%d questions (%.0f questions/s), %d features written", split,
                   index + 1, len(squad.examples), rate, num_features)
  elapsed = time.time() - started
  logging.info("%s: %d questions -> %d features in %.1f s (%.0f questions/s)", split,
               len(squad.examples), num_features, elapsed, len(squad.examples) / max(elapsed, 1e-9))
  return len(squad.examples) - sum(skipped.values()), num_features, skipped


def _resolve_inputs():
  """Which splits to make and from which files; exits with one line when a file is missing."""
  explicit = {records.TRAIN_SPLIT: FLAGS.train_file, records.EVAL_SPLIT: FLAGS.predict_file}
  if not any(explicit.values()):
    explicit = {
        records.TRAIN_SPLIT: definitions.default_squad_file(definitions.TRAIN_FILE_NAMES),
        records.EVAL_SPLIT: definitions.default_squad_file(definitions.PREDICT_FILE_NAMES)}
  inputs = {}
  for split, path in explicit.items():
    if not path:
      continue
    flag = "train_file" if split == records.TRAIN_SPLIT else "predict_file"
    if not os.path.exists(path):
      raise squad_reader.SquadInputError(definitions.missing_squad_file_message(flag, path))
    inputs[split] = path
  return inputs


def make_records():
  """Runs the job from FLAGS; returns the meta dict written to meta.json."""
  inputs = _resolve_inputs()
  if not FLAGS.vocab_file:
    raise squad_reader.SquadInputError(
        "--vocab_file is required (the encoder's vocab.txt, e.g. beside its checkpoint)")
  if FLAGS.doc_stride <= 0 or FLAGS.max_seq_length <= FLAGS.max_query_length + 3:
    raise squad_reader.SquadInputError(
        f"need doc_stride > 0 and max_seq_length > max_query_length + 3 "
        f"(got {FLAGS.doc_stride}, {FLAGS.max_seq_length}, {FLAGS.max_query_length})")
  tokenizer = wordpiece.WordPieceTokenizer(FLAGS.vocab_file, FLAGS.do_lower_case)
  tf.io.gfile.makedirs(FLAGS.output_dir)
  meta = {
      "format_version": 1,
      "flags": {name: FLAGS[name].value for name in (
          "vocab_file", "do_lower_case", "max_seq_length", "doc_stride", "max_query_length",
          "num_shards")},
      "vocab_sha256": wordpiece.file_sha256(FLAGS.vocab_file),
      "splits": {},
  }
  writers = []
  try:
    for split, path in inputs.items():
      squad = squad_reader.read_squad(path, is_training=split == records.TRAIN_SPLIT)
      writer = _ShardWriter(FLAGS.output_dir, split, FLAGS.num_shards)
      writers.append(writer)
      num_examples, num_features, skipped = featurize_split(
          squad, tokenizer, split, writer, FLAGS.num_shards, FLAGS.max_seq_length,
          FLAGS.doc_stride, FLAGS.max_query_length)
      skipped.update(squad.skipped)
      writer.close()
      meta["splits"][split] = {
          "input_file": os.path.abspath(path),
          "input_sha256": wordpiece.file_sha256(path),
          "num_examples": num_examples,
          "num_features": num_features,
          "skipped": dict(sorted(skipped.items())),
          "shards": writer.names,
      }
      if skipped:
        logging.warning("%s: skipped questions by reason: %s", split, dict(skipped))
  except BaseException:
    for writer in writers:
      writer.abort()
    raise
  for writer in writers:
    writer.commit()
  meta_path = os.path.join(FLAGS.output_dir, records.META_FILE)
  with tf.io.gfile.GFile(meta_path + ".tmp", "w") as f:
    json.dump(meta, f, indent=2)
  tf.io.gfile.rename(meta_path + ".tmp", meta_path, overwrite=True)
  logging.info("wrote %s", meta_path)
  return meta


def main(argv):
  del argv
  try:
    make_records()
  except (squad_reader.SquadInputError, ValueError, FileNotFoundError) as e:
    sys.exit(f"make_records.py: {e}")


if __name__ == "__main__":
  app.run(main)
