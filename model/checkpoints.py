"""What `--init_checkpoint` is, where its config and vocab are, and loading it into the span model.

Kinds, detected: `HF_FOLDER` (config.json + model.safetensors [+ vocab.txt]), `TF1_CHECKPOINT`
(google-research/bert's, a release or a run_squad.py output with its `cls/squad/*` head) and
`TF2_CHECKPOINT` (object-based: tfm encoder or QA checkpoints, a `--model_dir`, the output of
`python -m model.convert_checkpoint`). A folder means its latest checkpoint or its only `*.index`.
"""

import os
import re

import numpy as np
import tensorflow as tf

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.base import commands
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import hf_checkpoint
from squad_qa.model import named_weights
from squad_qa.model import tf1_checkpoint
from squad_qa.model import tf2_checkpoint
from squad_qa.preprocess import wordpiece

HF_FOLDER = "hf_folder"
TF1_CHECKPOINT = "tf1_checkpoint"
TF2_CHECKPOINT = "tf2_checkpoint"

BERT_CONFIG_FILE = bert_config_lib.GOOGLE_CONFIG_FILE

CheckpointError = named_weights.CheckpointError
LoadReport = named_weights.LoadReport
# Warned of when an encoder checkpoint without a SQuAD head (LoadReport.head_restored False) is
# predicted or exported from: its head is random.
UNTRAINED_HEAD = "the span head is untrained: answers will be meaningless until fine-tuned"

_SUFFIX = re.compile(r"\.(index|meta|data-\d+-of-\d+)$")
# Shaped like a Hugging Face Hub model id ("bert-base-uncased", "google-bert/bert-base-uncased"),
# as a bare local name is too.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def checkpoint_prefix(path):
  """The TF checkpoint prefix `path` stands for, or None when it holds none.

  Raises:
    CheckpointError: a folder with several checkpoints and no `checkpoint` state file, or whose
      state file names a checkpoint that is gone.
  """
  if tf.io.gfile.isdir(path):
    latest = latest_checkpoint(path, flag="init_checkpoint")
    if latest:
      return latest
    indexes = sorted(tf.io.gfile.glob(os.path.join(path, "*.index")))
    if len(indexes) > 1:
      raise CheckpointError(
          f"--init_checkpoint={path}: holds {len(indexes)} checkpoints "
          f"({', '.join(os.path.basename(i)[:-len('.index')] for i in indexes[:3])}) and no "
          f"'checkpoint' file; pass one prefix, e.g. {indexes[0][:-len('.index')]}")
    return indexes[0][:-len(".index")] if indexes else None
  prefix = _SUFFIX.sub("", path)
  return prefix if tf.io.gfile.exists(prefix + ".index") else None


def _refuse_a_near_miss(path):
  """Raises errors.UsageError when `path` is not a checkpoint but names one: a file of an HF folder
  (its model.safetensors or config.json; the folder is the checkpoint) or an export of
  squad-qa-export (its weights serve, the --model_dir it came from trains)."""
  folder = os.path.dirname(path.rstrip("/")) or "."
  if os.path.isfile(path) and hf_checkpoint.is_hf_folder(folder):
    raise errors.UsageError(
        f"--init_checkpoint={path} is a file of a Hugging Face checkpoint; pass "
        f"the folder holding it: --init_checkpoint={folder}")
  if os.path.isfile(os.path.join(path, artifacts.EXPORT_EXTRA_DIR, artifacts.QA_CONFIG_FILE)):
    raise errors.UsageError(
        f"--init_checkpoint={path} is an export of {commands.command('squad-qa-export')}, which "
        f"serves and does not train; pass the --model_dir it was exported from")


def checkpoint_kind(path):
  """`HF_FOLDER`, `TF1_CHECKPOINT` or `TF2_CHECKPOINT`.

  Raises:
    FileNotFoundError: none of them at `path` (saying what was looked for).
    CheckpointError: a TF checkpoint that is not a BERT one.
  """
  if hf_checkpoint.is_hf_folder(path):
    return HF_FOLDER
  prefix = checkpoint_prefix(path)
  if not prefix:
    _refuse_a_near_miss(path)
    inside = _checkpoints_inside(path)
    if inside:
      raise errors.MissingFileError(
          f"--init_checkpoint={path}: not a checkpoint, but {' and '.join(inside)} in it "
          f"{'is one' if len(inside) == 1 else 'are'}: pass that folder")
    raise errors.MissingFileError(
        f"--init_checkpoint={path}: not found or not a checkpoint; expected an HF BERT folder "
        f"(config.json + model.safetensors), a google-research/bert TF1 checkpoint (a folder or "
        f"prefix with .index, e.g. uncased_L-12_H-768_A-12/bert_model.ckpt) or a TF2 checkpoint")
  names = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
  if tf2_checkpoint.is_object_based(names):
    return TF2_CHECKPOINT
  if tf1_checkpoint.is_tf1_bert(names):
    return TF1_CHECKPOINT
  raise CheckpointError(
      f"--init_checkpoint={prefix}: a TF1 checkpoint without bert/embeddings/word_embeddings "
      f"(it has e.g. {', '.join(sorted(names)[:3])}); not a google-research/bert checkpoint")


def _checkpoints_inside(folder):
  """The subfolders of `folder` (one level) that hold a checkpoint of a kind `checkpoint_kind`
  reads (an installed model package keeps its weights in one)."""
  if not tf.io.gfile.isdir(folder):
    return []
  return [
      os.path.join(folder, name) for name in sorted(tf.io.gfile.listdir(folder))
      if hf_checkpoint.is_hf_folder(os.path.join(folder, name)) or
      tf.io.gfile.glob(os.path.join(folder, name, "*.index"))
  ]


def checkpoint_folder(init_checkpoint):
  """The folder of an --init_checkpoint folder or prefix."""
  if tf.io.gfile.isdir(init_checkpoint):
    return init_checkpoint
  return os.path.dirname(_SUFFIX.sub("", init_checkpoint))


def files_beside(init_checkpoint, bert_config_file, vocab_file):
  """(bert_config_file, vocab_file), the ones not given looked up beside `init_checkpoint`
  (`bert_config.json` or `config.json`, `vocab.txt`); None where not found."""
  if not init_checkpoint:
    return bert_config_file, vocab_file
  folder = checkpoint_folder(init_checkpoint)
  for name in bert_config_lib.CONFIG_FILE_NAMES:
    if not bert_config_file and tf.io.gfile.exists(os.path.join(folder, name)):
      bert_config_file = os.path.join(folder, name)
  if not vocab_file and tf.io.gfile.exists(os.path.join(folder, hf_checkpoint.VOCAB_FILE)):
    vocab_file = os.path.join(folder, hf_checkpoint.VOCAB_FILE)
  return bert_config_file, vocab_file


def initialize_from(model, init_checkpoint):
  """Loads starting weights into a span model: every encoder variable, the span head when the
  checkpoint has one; returns a `named_weights.LoadReport`.

  Raises:
    FileNotFoundError: nothing usable at `init_checkpoint`.
    CheckpointError: a missing or mis-shaped variable.
  """
  kind = checkpoint_kind(init_checkpoint)
  encoder_config = model.labeler.checkpoint_items["encoder"].get_config()
  if kind == HF_FOLDER:
    return hf_checkpoint.read_hf_weights(model, init_checkpoint,
                                         encoder_config["num_attention_heads"])
  prefix = checkpoint_prefix(init_checkpoint)
  if kind == TF1_CHECKPOINT:
    return tf1_checkpoint.load_tf1_weights(model, prefix, encoder_config["num_attention_heads"],
                                           encoder_config["num_layers"])
  return tf2_checkpoint.load_tf2_weights(model, prefix)


def latest_checkpoint(folder, flag="model_dir"):
  """The checkpoint prefix `folder`'s `checkpoint` state file names, or None without one.

  Raises:
    CheckpointError: the named checkpoint's `.index` is gone (`flag` names `folder` in the message).
  """
  state = tf.train.get_checkpoint_state(folder) if tf.io.gfile.isdir(folder) else None
  if state is None or not state.model_checkpoint_path:
    return None
  prefix = state.model_checkpoint_path  # get_checkpoint_state joins a relative one to `folder`
  if tf.io.gfile.exists(prefix + ".index"):
    return prefix
  others = sorted(
      os.path.basename(p)[:-len(".index")]
      for p in tf.io.gfile.glob(os.path.join(folder, "*.index")))
  raise CheckpointError(
      f"--{flag}={folder}: its 'checkpoint' file names {os.path.basename(prefix)}, whose files are "
      f"gone ({', '.join(others) + ' still there' if others else 'no checkpoint left'}); delete "
      f"{os.path.join(folder, 'checkpoint')} to start afresh, or edit it to name a checkpoint "
      f"that exists")


def resolve_model_files(init_checkpoint, bert_config_file, vocab_file):
  """(bert_config_file, vocab_file) for a run from --init_checkpoint: the given ones, else
  those beside it, else those its folder's qa_config.json names; None where not found.

  Raises:
    errors.MissingFileError: `init_checkpoint` names no file, folder or checkpoint prefix, or,
      when no config is found for it, holds no checkpoint (said before a missing config is).
    errors.UsageError: a file of an HF folder or an export as `init_checkpoint`, a folder as
      `vocab_file`, or a `vocab_file` with other tokens than the checkpoint's own vocab (its token
      ids would mean other words to the encoder).
  """
  if vocab_file:
    wordpiece.refuse_a_folder(vocab_file)
  if init_checkpoint and not (tf.io.gfile.exists(init_checkpoint) or
                              tf.io.gfile.glob(_SUFFIX.sub("", init_checkpoint) + ".*")):
    hub_id = "" if not _HUB_ID.fullmatch(init_checkpoint) else (
        " (if that is a Hugging Face Hub id: ids are not downloaded; pass the model's folder, "
        "with config.json, model.safetensors and vocab.txt)")
    raise errors.MissingFileError(
        f"--init_checkpoint={init_checkpoint}: no such file, folder or checkpoint prefix{hub_id}")
  if init_checkpoint:
    _refuse_a_near_miss(init_checkpoint)  # before its folder's config sizes the run
  given_vocab = vocab_file
  bert_config_file, vocab_file = files_beside(init_checkpoint, bert_config_file, None)
  if init_checkpoint and (not bert_config_file or not vocab_file):
    saved = artifacts.read_qa_config(checkpoint_folder(init_checkpoint))
    if not bert_config_file and tf.io.gfile.exists(saved.get("bert_config_file") or ""):
      bert_config_file = saved["bert_config_file"]
    if not vocab_file and tf.io.gfile.exists(saved.get("vocab_file") or ""):
      vocab_file = saved["vocab_file"]
  if init_checkpoint and not bert_config_file:
    checkpoint_kind(init_checkpoint)  # a folder of no checkpoint: say that, not "pass a config"
  # (A given vocab that does not exist is each command's own one-line error.)
  if (given_vocab and vocab_file and tf.io.gfile.exists(given_vocab) and
      not wordpiece.same_vocab(given_vocab, vocab_file)):
    raise errors.UsageError(
        f"--vocab_file={given_vocab} is not the vocab of --init_checkpoint={init_checkpoint} "
        f"({vocab_file}, other tokens): its token ids mean other words to the encoder; drop "
        f"--vocab_file to use the checkpoint's")
  return bert_config_file, given_vocab or vocab_file


_DATA_SHARD = re.compile(r"\.data-(\d+)-of-(\d+)$")


def damage(prefix):
  """What makes the TF checkpoint `prefix` unreadable, as a clause naming the file ("<file> is
  missing", "<file> is damaged (<why>)", "<file> is truncated (...)"), or None. Cheap: reads the
  index, not the tensors; a data shard is truncated when shorter than its numeric tensors."""
  index = prefix + ".index"
  if not tf.io.gfile.exists(index):
    return f"{index} is missing"
  try:
    reader = tf.train.load_checkpoint(prefix)
  except (tf.errors.OpError, ValueError) as e:
    return f"{index} is damaged ({str(e).strip().splitlines()[0]})"
  shards = sorted(tf.io.gfile.glob(prefix + ".data-*-of-*"))
  if not shards:
    return f"{prefix}.data-00000-of-* is missing"
  count = int(_DATA_SHARD.search(shards[0]).group(2))
  for i in range(count):
    name = f"{prefix}.data-{i:05d}-of-{count:05d}"
    if not tf.io.gfile.exists(name):
      return f"{name} is missing"
  shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
  needed = sum(
      int(np.prod(shapes[name])) * dtypes[name].size for name in shapes
      if dtypes[name] != tf.string)
  size = sum(tf.io.gfile.stat(name).length for name in shards)
  if size < needed:
    return (f"{shards[0] if count == 1 else prefix + '.data-*'} is truncated ({size:,} bytes, its "
            f"tensors take {needed:,})")
  return None


def check_intact(prefix, folder):
  """Refuses the --model_dir `folder`'s checkpoint `prefix` when `damage` finds it unreadable.

  Raises:
    CheckpointError: one line naming the file and how to continue: from the checkpoint before
      it (train.py resumes there and writes this one again), or afresh.
  """
  found = damage(prefix)
  if found is None:
    return
  name = os.path.basename(prefix)
  state_file = os.path.join(folder, artifacts.CHECKPOINT_STATE_FILE)
  state = tf.train.get_checkpoint_state(folder)
  earlier = [
      os.path.basename(path) for path in (state.all_model_checkpoint_paths if state else [])
      if path != prefix and tf.io.gfile.exists(path + ".index")
  ]
  train = commands.command("squad-qa-train")
  if earlier:
    how = (f"delete {prefix}.* and edit {state_file} to name {earlier[-1]}: {train} resumes from "
           f"it and writes {name} again")
  else:
    how = f"delete {prefix}.* and {state_file}: {train} then starts the run again"
  raise CheckpointError(f"{found}: --model_dir={folder} cannot continue from {name}; {how}")
