"""A --model_dir's state: where a run starts, and the checkpoints it writes.

`decide_start` is the one rule, shared by train.py and export.py, between the checkpoint a
`--model_dir` already holds and `--init_checkpoint`; `ModelDirCheckpointManager` writes the
`--model_dir`'s `qa_config.json` with its first checkpoint.
"""

import dataclasses
import os

import tensorflow as tf

from squad_qa.base import artifacts
from squad_qa.model import checkpoints
from squad_qa.model import hf_checkpoint


def _canonical(init_checkpoint):
  """An --init_checkpoint as one absolute path: a TF checkpoint's prefix, else the real folder."""
  try:
    prefix = (None if hf_checkpoint.is_hf_folder(init_checkpoint)
              else checkpoints.checkpoint_prefix(init_checkpoint))
  except checkpoints.CheckpointError:
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
  latest = checkpoints.latest_checkpoint(model_dir) if model_dir else None
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
  raise checkpoints.CheckpointError(
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
