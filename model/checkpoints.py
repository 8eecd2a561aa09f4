"""Where the encoder's starting weights, config and vocabulary come from (`--init_checkpoint`).

Kinds handled here: a Hugging Face BERT folder (config.json + model.safetensors + vocab.txt), and a
TF2 checkpoint written by this project's training (a `--model_dir` or a checkpoint prefix).
"""

import os

import tensorflow as tf
from absl import logging

from model import hf_checkpoint

HF_FOLDER = "hf_folder"
TF2_CHECKPOINT = "tf2_checkpoint"


def checkpoint_kind(path):
  """`HF_FOLDER` or `TF2_CHECKPOINT`.

  Raises:
    FileNotFoundError: the path holds neither, with what was looked for.
  """
  if hf_checkpoint.is_hf_folder(path):
    return HF_FOLDER
  if tf.io.gfile.isdir(path) and tf.train.latest_checkpoint(path):
    return TF2_CHECKPOINT
  if tf.io.gfile.exists(path + ".index"):
    return TF2_CHECKPOINT
  raise FileNotFoundError(
      f"--init_checkpoint={path}: neither an HF BERT folder (config.json + model.safetensors) nor "
      f"a TF2 checkpoint (a folder with a 'checkpoint' file, or a prefix with .index)")


def resolve_model_files(init_checkpoint, bert_config_file, vocab_file):
  """Fills in --bert_config_file and --vocab_file from the files beside --init_checkpoint.

  Returns:
    (bert_config_file, vocab_file) paths; either may be None when nothing was given or found.
  """
  if init_checkpoint:
    folder = init_checkpoint if tf.io.gfile.isdir(init_checkpoint) else os.path.dirname(
        init_checkpoint)
    for name in ("bert_config.json", hf_checkpoint.CONFIG_FILE):
      if not bert_config_file and tf.io.gfile.exists(os.path.join(folder, name)):
        bert_config_file = os.path.join(folder, name)
    if not vocab_file and tf.io.gfile.exists(os.path.join(folder, hf_checkpoint.VOCAB_FILE)):
      vocab_file = os.path.join(folder, hf_checkpoint.VOCAB_FILE)
  return bert_config_file, vocab_file


def initialize_from(model, init_checkpoint):
  """Loads starting weights into a model built by `model.span_model.build_span_model`.

  Returns:
    A one-line description of what was restored, for the log.
  """
  kind = checkpoint_kind(init_checkpoint)
  if kind == HF_FOLDER:
    report = hf_checkpoint.load_hf_weights(model, init_checkpoint)
    return (f"HF folder {init_checkpoint}: restored {len(report['restored'])} weights, "
            f"new: {', '.join(report['new']) or 'none'}")
  path = init_checkpoint
  if tf.io.gfile.isdir(path):
    path = tf.train.latest_checkpoint(path)
  tf.train.Checkpoint(model=model).read(path).expect_partial().assert_existing_objects_matched()
  return f"TF2 checkpoint {path}: restored the model"
