r"""Writes a SavedModel of the QA model for serving.

  python export.py --model_dir=model_out --export_dir=export
  python export.py --init_checkpoint=<any --init_checkpoint kind> --export_dir=export
      # warns when the checkpoint has no fine-tuned span head (run_squad.py / HF qa_outputs)

Signatures (also the `serving_default` for now):
  serve_features: int32 [batch, seq] `input_word_ids`, `input_mask`, `input_type_ids`
                  -> float32 [batch, seq] `start_logits`, `end_logits`.
The SavedModel carries the WordPiece vocab as an asset (`vocab_file`) and, in
`assets.extra/qa_config.json`, the featurization settings (max_seq_length, doc_stride,
max_query_length, do_lower_case) so a client tokenizes as training did (see ask.py). It loads with
`tf.saved_model.load` and `saved_model_cli` without this project's code. The export is written under a
temporary name and renamed into place when complete.
"""

import json
import os
import shutil
import sys

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

from flags import definitions
from model import bert_config as bert_config_lib
from model import checkpoints
from model import span_model

definitions.define_tokenizer_flags()
definitions.define_model_flags()
definitions.define_export_flags()
FLAGS = flags.FLAGS

QA_CONFIG_FILE = "qa_config.json"  # written by train.py into --model_dir
EXTRA_DIR = "assets.extra"
# Featurization used when exporting straight from --init_checkpoint (make_records.py's defaults).
DEFAULT_FEATURIZATION = {"max_seq_length": 384, "doc_stride": 128, "max_query_length": 64}


class QAServingModule(tf.Module):
  """The exported object: the model, its vocab asset and the `serve_features` function."""

  def __init__(self, model, vocab_file):
    super().__init__()
    self.model = model
    self.vocab_file = tf.saved_model.Asset(vocab_file)

  @tf.function(input_signature=[
      tf.TensorSpec([None, None], tf.int32, name=span_model.INPUT_WORD_IDS),
      tf.TensorSpec([None, None], tf.int32, name=span_model.INPUT_MASK),
      tf.TensorSpec([None, None], tf.int32, name=span_model.INPUT_TYPE_IDS)])
  def serve_features(self, input_word_ids, input_mask, input_type_ids):
    """Token ids in, float32 [batch, seq] start/end logits out."""
    start_logits, end_logits = self.model({
        span_model.INPUT_WORD_IDS: input_word_ids,
        span_model.INPUT_MASK: input_mask,
        span_model.INPUT_TYPE_IDS: input_type_ids}, training=False)
    return {"start_logits": start_logits, "end_logits": end_logits}


def export(model, vocab_file, qa_config, export_dir):
  """Saves `model` as a SavedModel at `export_dir`, replacing what was there only when complete.

  Args:
    model: a model from `model.span_model.build_span_model`, weights loaded.
    vocab_file: its vocab.txt (copied into the SavedModel's assets).
    qa_config: dict of featurization settings, written to assets.extra/qa_config.json.
    export_dir: destination folder.
  """
  module = QAServingModule(model, vocab_file)
  temp_dir = export_dir.rstrip("/") + ".tmp-export"
  if os.path.exists(temp_dir):
    shutil.rmtree(temp_dir)
  signature = module.serve_features.get_concrete_function()
  tf.saved_model.save(module, temp_dir,
                      signatures={"serve_features": signature, "serving_default": signature})
  os.makedirs(os.path.join(temp_dir, EXTRA_DIR), exist_ok=True)
  with open(os.path.join(temp_dir, EXTRA_DIR, QA_CONFIG_FILE), "w") as f:
    json.dump(qa_config, f, indent=2)
  if os.path.exists(export_dir):
    shutil.rmtree(export_dir)
  os.rename(temp_dir, export_dir)
  logging.info("exported SavedModel to %s", export_dir)


def run():
  """export.py's job from FLAGS."""
  saved = os.path.join(FLAGS.model_dir, QA_CONFIG_FILE)
  latest = tf.train.latest_checkpoint(FLAGS.model_dir) if tf.io.gfile.isdir(FLAGS.model_dir) else None
  if latest and tf.io.gfile.exists(saved):
    with tf.io.gfile.GFile(saved) as f:
      qa_config = json.load(f)
    config = bert_config_lib.BertConfig(**qa_config["bert_config"])
    vocab_file = FLAGS.vocab_file or qa_config["vocab_file"]
  elif FLAGS.init_checkpoint:
    config_file, vocab_file = checkpoints.resolve_model_files(
        FLAGS.init_checkpoint, FLAGS.bert_config_file, FLAGS.vocab_file)
    if not config_file or not vocab_file:
      raise ValueError("--bert_config_file and --vocab_file are needed for this --init_checkpoint")
    config = bert_config_lib.BertConfig.from_json_file(config_file)
    qa_config = dict(DEFAULT_FEATURIZATION, do_lower_case=FLAGS.do_lower_case)
  else:
    raise ValueError(f"--model_dir={FLAGS.model_dir} has no trained checkpoint and no "
                     f"--init_checkpoint was given; run train.py first")
  model, _ = span_model.build_span_model(config)
  if latest:
    tf.train.Checkpoint(model=model).read(latest).expect_partial().assert_existing_objects_matched()
    logging.info("exporting %s", latest)
  else:
    report = checkpoints.initialize_from(model, FLAGS.init_checkpoint)
    logging.info("exporting %s", report)
    if not report.head_restored:
      logging.warning("the span head is untrained: answers will be meaningless until fine-tuned")
  qa_config = {k: qa_config[k] for k in ("max_seq_length", "doc_stride", "max_query_length",
                                          "do_lower_case")}
  export(model, vocab_file, qa_config, FLAGS.export_dir)


def main(argv):
  del argv
  try:
    run()
  except (ValueError, FileNotFoundError) as e:
    sys.exit(f"export.py: {e}")


if __name__ == "__main__":
  app.run(main)
