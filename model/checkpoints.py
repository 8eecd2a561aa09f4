"""What `--init_checkpoint` is, where its config and vocab are, and loading it into the span model.

Kinds accepted (detected, never declared by a flag):
- `HF_FOLDER`: a Hugging Face BERT folder (config.json + model.safetensors [+ vocab.txt]);
  `pytorch_model.bin` alone is an error that says how to convert it.
- `TF1_CHECKPOINT`: a google-research/bert checkpoint (`bert/embeddings/word_embeddings`, ...): a
  pretrained release such as `uncased_L-12_H-768_A-12/` (a folder with `bert_model.ckpt.*` and no
  `checkpoint` file) or a run_squad.py `--output_dir` (its `cls/squad/*` head is restored too).
- `TF2_CHECKPOINT`: an object-based checkpoint: tf-models-official's encoder checkpoints
  (`tf.train.Checkpoint(encoder=...)`), tfm QA task or this tool's `--model_dir` (head included),
  or the output of `python -m model.convert_checkpoint`.

A folder means its latest checkpoint (the `checkpoint` state file) or its only `*.index`; a prefix
may also be given with its `.index` / `.data-*` / `.meta` suffix.

`--model_dir` is the other place a run can start from: `decide_start` is the one rule, shared by
train.py and export.py, between the checkpoint a `--model_dir` already holds and `--init_checkpoint`,
and `ModelDirCheckpointManager` writes the `--model_dir`'s `qa_config.json` with its first checkpoint.
"""

import dataclasses
import os
import re

import tensorflow as tf

from squad_qa.model import hf_checkpoint
from squad_qa.model import named_weights
from squad_qa.model import tf1_checkpoint
from squad_qa.model import tf2_checkpoint
from squad_qa.tasks import artifacts

HF_FOLDER = "hf_folder"
TF1_CHECKPOINT = "tf1_checkpoint"
TF2_CHECKPOINT = "tf2_checkpoint"

BERT_CONFIG_FILE = "bert_config.json"  # google-research/bert's name

CheckpointError = named_weights.CheckpointError
LoadReport = named_weights.LoadReport

_SUFFIX = re.compile(r"\.(index|meta|data-\d+-of-\d+)$")


def checkpoint_prefix(path):
  """The TF checkpoint prefix `path` stands for, or None when it holds no TF checkpoint.

  Raises:
    CheckpointError: a folder with several checkpoints and no `checkpoint` state file to choose,
      or whose `checkpoint` state file names a checkpoint that is gone.
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


def checkpoint_kind(path):
  """`HF_FOLDER`, `TF1_CHECKPOINT` or `TF2_CHECKPOINT`.

  Raises:
    FileNotFoundError: the path holds none of them, saying what was looked for.
    CheckpointError: a TF checkpoint that is not a BERT one.
  """
  if hf_checkpoint.is_hf_folder(path):
    return HF_FOLDER
  prefix = checkpoint_prefix(path)
  if not prefix:
    raise FileNotFoundError(
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


def checkpoint_folder(init_checkpoint):
  """The folder of an --init_checkpoint: itself, or the folder of a prefix (with or without suffix)."""
  if tf.io.gfile.isdir(init_checkpoint):
    return init_checkpoint
  return os.path.dirname(_SUFFIX.sub("", init_checkpoint))


def resolve_model_files(init_checkpoint, bert_config_file, vocab_file):
  """Fills in --bert_config_file and --vocab_file from the files beside --init_checkpoint.

  Looks in the checkpoint's folder for `bert_config.json` (google-research) or `config.json` (HF),
  and `vocab.txt`; in a `--model_dir` of train.py, for the files its `qa_config.json` names.

  Returns:
    (bert_config_file, vocab_file) paths; either may be None when nothing was given or found.
  """
  if not init_checkpoint:
    return bert_config_file, vocab_file
  folder = checkpoint_folder(init_checkpoint)
  for name in (BERT_CONFIG_FILE, hf_checkpoint.CONFIG_FILE):
    if not bert_config_file and tf.io.gfile.exists(os.path.join(folder, name)):
      bert_config_file = os.path.join(folder, name)
  if not vocab_file and tf.io.gfile.exists(os.path.join(folder, hf_checkpoint.VOCAB_FILE)):
    vocab_file = os.path.join(folder, hf_checkpoint.VOCAB_FILE)
  if not bert_config_file or not vocab_file:
    saved = artifacts.read_qa_config(folder)
    if not bert_config_file and tf.io.gfile.exists(saved.get("bert_config_file") or ""):
      bert_config_file = saved["bert_config_file"]
    if not vocab_file and tf.io.gfile.exists(saved.get("vocab_file") or ""):
      vocab_file = saved["vocab_file"]
  return bert_config_file, vocab_file


def initialize_from(model, init_checkpoint):
  """Loads starting weights into a model built by `model.span_model.build_span_model`.

  Every encoder variable must come from the checkpoint with the model's shape; the span head comes
  from it when it holds one (a fine-tuned SQuAD model), else it stays randomly initialized. The
  pooler may be missing (it is not used by the span head). Logs what was restored and what is new.

  Returns:
    A `named_weights.LoadReport`; `str()` of it is a one-line summary, `.head_restored` says
    whether the span head was trained.

  Raises:
    FileNotFoundError: nothing usable at `init_checkpoint`.
    CheckpointError: a missing or mis-shaped variable (one line with names and shapes).
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

  `tf.train.latest_checkpoint` returns None (and logs an error) when the named checkpoint's files
  are gone, and restoring it raises a NotFoundError traceback; here that is one line with the fix.

  Args:
    folder: a directory written by `tf.train.CheckpointManager` (a --model_dir).
    flag: the flag that named `folder`, for the message.

  Raises:
    CheckpointError: the state file names a checkpoint whose `.index` file is missing.
  """
  state = tf.train.get_checkpoint_state(folder) if tf.io.gfile.isdir(folder) else None
  if state is None or not state.model_checkpoint_path:
    return None
  prefix = state.model_checkpoint_path  # get_checkpoint_state joins a relative one to `folder`
  if tf.io.gfile.exists(prefix + ".index"):
    return prefix
  others = sorted(os.path.basename(p)[:-len(".index")]
                  for p in tf.io.gfile.glob(os.path.join(folder, "*.index")))
  raise CheckpointError(
      f"--{flag}={folder}: its 'checkpoint' file names {os.path.basename(prefix)}, whose files are "
      f"gone ({', '.join(others) + ' still there' if others else 'no checkpoint left'}); delete "
      f"{os.path.join(folder, 'checkpoint')} to start afresh, or edit it to name a checkpoint "
      f"that exists")


def _canonical(init_checkpoint):
  """An --init_checkpoint as one absolute path: a TF checkpoint's prefix, else the real folder."""
  try:
    prefix = None if hf_checkpoint.is_hf_folder(init_checkpoint) else checkpoint_prefix(
        init_checkpoint)
  except CheckpointError:
    prefix = None  # not one checkpoint: compared as written (it cannot be loaded anyway)
  return os.path.realpath(prefix or init_checkpoint.rstrip("/"))


@dataclasses.dataclass(frozen=True)
class Start:
  """Where a run's weights come from (see `decide_start`).

  Attributes:
    resume: the --model_dir checkpoint prefix to restore (model and optimizer), or None.
    init_checkpoint: the --init_checkpoint to load when not resuming (None: random weights).
    ignored: when resuming although --init_checkpoint was given, why it is not used (one clause).
    recorded: qa_config.json entries that record where the --model_dir started
      ({"init_checkpoint": absolute path or None}; {} when an older --model_dir never recorded it).
  """
  resume: str = None
  init_checkpoint: str = None
  ignored: str = None
  recorded: dict = dataclasses.field(default_factory=dict)

  def describe(self, doing, step=None):
    """One log line, e.g. "resumed from model_out/ckpt-4 at step 4; --init_checkpoint=... is ignored: ..."."""
    where = self.resume + (f" at step {step}" if step is not None else "")
    return f"{doing} {where}" + (f"; {self.ignored}" if self.ignored else "")


def decide_start(model_dir, init_checkpoint):
  """The one rule for a --model_dir that may already hold a checkpoint and an --init_checkpoint.

  - No checkpoint in `model_dir` (or no `model_dir`): start from `init_checkpoint` (or random).
  - A checkpoint and no `init_checkpoint`: resume it (what google-research/bert's Estimator and
    tfm's `restore_or_initialize` do, so re-running a command continues an interrupted run).
  - A checkpoint, and `init_checkpoint` names this `model_dir` (the folder or its latest
    checkpoint), or the checkpoint the `model_dir` started from (its qa_config.json records it):
    resume, and say that `init_checkpoint` is ignored and why. This is re-running the same command.
  - A checkpoint, and `init_checkpoint` names anything else: refuse. Starting afresh would
    overwrite the trained checkpoints, resuming would silently drop the checkpoint the user named.

  Args:
    model_dir: the --model_dir (str) or None (export.py given only --init_checkpoint).
    init_checkpoint: the --init_checkpoint (str) or None.

  Returns:
    A `Start`.

  Raises:
    CheckpointError: the refusal above, or a `checkpoint` state file naming a missing checkpoint
      (one line each, with the fix).
  """
  latest = latest_checkpoint(model_dir) if model_dir else None
  if not latest:
    return Start(init_checkpoint=init_checkpoint,
                 recorded={"init_checkpoint": _canonical(init_checkpoint) if init_checkpoint
                           else None})
  saved = artifacts.read_qa_config(model_dir)
  recorded = {"init_checkpoint": saved["init_checkpoint"]} if "init_checkpoint" in saved else {}
  if not init_checkpoint:
    return Start(resume=latest, recorded=recorded)
  named = _canonical(init_checkpoint)
  if named in (os.path.realpath(model_dir), os.path.realpath(latest)):
    return Start(resume=latest, recorded=recorded)
  if recorded and named == recorded["init_checkpoint"]:
    return Start(resume=latest, recorded=recorded, ignored=(
        f"--init_checkpoint={init_checkpoint} is ignored: --model_dir={model_dir} started from it "
        f"and holds the training since (pass a new --model_dir to start again from it)"))
  started = ("which started from " + (recorded["init_checkpoint"] or "random weights")
             if recorded else "whose start is not recorded")
  raise CheckpointError(
      f"--model_dir={model_dir} already holds {os.path.basename(latest)}, {started}, and "
      f"--init_checkpoint={init_checkpoint} names another start; pass a new --model_dir to start "
      f"from it, or drop --init_checkpoint to continue {os.path.basename(latest)}")


class ModelDirCheckpointManager(tf.train.CheckpointManager):
  """A `tf.train.CheckpointManager` that calls `before_first_save()` just before its first save.

  train.py passes the writing of the --model_dir's qa_config.json, which describes the checkpoints
  beside it: written with the run's first checkpoint, once a training step has succeeded, a run
  that fails earlier (bad flags, a checkpoint that does not fit, out of memory in the first step)
  leaves no qa_config.json behind, and a --model_dir never holds a checkpoint without one. Works
  wherever a CheckpointManager is taken (e.g. orbit's Controller, which calls `save`).
  """

  def __init__(self, checkpoint, directory, before_first_save, **kwargs):
    """`before_first_save`: a function of no arguments; other arguments as the base class."""
    super().__init__(checkpoint, directory, **kwargs)
    self._before_first_save = before_first_save

  def save(self, *args, **kwargs):
    if self._before_first_save is not None:
      self._before_first_save()
      self._before_first_save = None
    return super().save(*args, **kwargs)
