"""Assigns checkpoint arrays to a span model's variables by tfm name, with checks, and reports
what it did.

Every checkpoint reader turns its file into `Entry`s; `assign` checks them all before it changes
any weight, so a bad checkpoint never leaves a half-loaded model. Only the span head and BERT's
pooler may stay as initialized; a wrong shape, an encoder variable without a value, or an encoder
tensor without a place in the model is an error.
"""

import collections
import dataclasses
import re
from typing import Callable, Optional

import numpy as np
from absl import logging

from squad_qa import errors

HEAD_PREFIX = "predictions/transform/logits/"
POOLER_PREFIX = "pooler_transform/"


class CheckpointError(errors.UserError, ValueError):
  """A checkpoint that does not fit the model; the message is one line naming file and variable."""


@dataclasses.dataclass
class Entry:
  """One checkpoint tensor on its way into one model variable.

  Attributes:
    source_name, source_shape: the name and shape in the checkpoint.
    target: the model variable's `variable_name`, e.g. `transformer/layer_0/...`.
    target_shape: the shape after conversion; None when its size cannot fit.
    load: returns the converted NumPy array (called only after all checks passed).
  """
  source_name: str
  source_shape: tuple
  target: str
  target_shape: Optional[tuple]
  load: Callable[[], np.ndarray]


@dataclasses.dataclass
class LoadReport:
  """What a checkpoint load did (model variable names unless said otherwise): its `kind` and
  `path`; `restored`, `new` (left as initialized) and `unused` checkpoint names; `head_restored`."""
  kind: str
  path: str
  restored: list
  new: list
  unused: list
  head_restored: bool

  def __str__(self):
    """One line: what was restored, and only what a user may act on among the rest: tensors the
    model has no place for, and a fine-tuned checkpoint's training state that is not resumed.
    Left unsaid: the pooler (no part of QA) and what every pretrained BERT carries besides its
    encoder (`is_pretraining_extra`, a pretraining run's step and optimizer)."""
    head = ("span head restored (fine-tuned)"
            if self.head_restored else "span head new (randomly initialized, untrained)")
    text = f"{self.kind} {self.path}: restored {len(self.restored)} variables, {head}"
    left_out = [
        name for name in self.unused
        if not is_training_state(name) and not is_pretraining_extra(name)
    ]
    if left_out:
      text += f"; not loaded, as the model has no place for them: {summarize(left_out)}"
    if self.head_restored and any(is_training_state(name) for name in self.unused):
      text += ("; its training state (optimizer, step counts, dropout) is left: this run "
               "starts its own")
    return text


# What a pretrained BERT checkpoint holds besides the encoder: the pretraining heads (masked LM,
# next sentence; google-research and HF names) and HF's position_ids buffer (0, 1, 2, ...).
_PRETRAINING_EXTRA = re.compile(r"cls[./](predictions|seq_relationship)[./].+|"
                                r"(bert\.)?embeddings\.position_ids")


def is_pretraining_extra(name):
  """Whether checkpoint name `name` is a pretraining head's tensor or HF's position_ids buffer,
  which fine-tuning for QA never uses."""
  return bool(_PRETRAINING_EXTRA.fullmatch(name))


# Checkpoint keys a --model_dir checkpoint holds beside the model (tasks/model_dir.py writes them).
SCHEDULE_STEPS_KEY = "schedule_num_train_steps"  # the schedule's length
SCHEDULE_LEARNING_RATE_KEY = "schedule_learning_rate"  # its peak (--learning_rate)
SCHEDULE_WARMUP_KEY = "schedule_warmup_proportion"  # its --warmup_proportion
TRAIN_BUDGET_KEY = "schedule_train_budget_seconds"  # the --train_budget that planned it (0: none)
GLOBAL_BATCH_KEY = "schedule_global_batch_size"  # features per step it counts (0: not recorded)
DROPOUT_STATE_KEY = "dropout_rng"  # the dropout layers' generator states
# First parts of checkpoint names that hold a run's training state, not the model's weights
# ("checkpointed_runs": tf.distribute's PreemptionCheckpointHandler's count of saves).
_TRAINING_STATE = ("optimizer", "save_counter", "global_step", "checkpointed_runs",
                   SCHEDULE_STEPS_KEY, SCHEDULE_LEARNING_RATE_KEY, SCHEDULE_WARMUP_KEY,
                   TRAIN_BUDGET_KEY, GLOBAL_BATCH_KEY, DROPOUT_STATE_KEY)


def is_training_state(name):
  """Whether checkpoint name `name` is training state (optimizer slots and steps, step counters,
  dropout generators, the schedule), which a new run starts afresh. Slots are TF1's `adam_m`/
  `adam_v` beside their variable, or a TF2 object checkpoint's `<variable>/.OPTIMIZER_SLOT/...`."""
  parts = name.split("/")
  return (parts[-1] in ("adam_m", "adam_v") or ".OPTIMIZER_SLOT" in parts or
          parts[0] in _TRAINING_STATE)


def summarize(names):
  """A short account of checkpoint names: `cls/predictions/* (5), cls/seq_relationship/* (2)`."""
  groups = collections.Counter()
  for name in names:
    parts = name.split("/")
    groups["/".join(parts[:2]) + "/*" if len(parts) > 2 else name] += 1
  return ", ".join(f"{key} ({count})" if count > 1 else key for key, count in groups.items())


def variable_name(weight):
  """A model variable's name without Keras's `:0` suffix (and a `_N` uniquifier before it)."""
  return re.sub(r"(_\d+)?:0$", "", weight.name)


def model_variables(model):
  """{variable_name: variable} of all the model's weights."""
  return {variable_name(w): w for w in model.weights}


def is_optional(name):
  """True for variables a checkpoint may lack: the span head and BERT's pooler."""
  return name.startswith(HEAD_PREFIX) or name.startswith(POOLER_PREFIX)


def _shape(shape):
  return tuple(int(d) for d in shape)


def assign(model, entries, unused, path, kind, hint="does --bert_config_file match the checkpoint?",
           source_names=None):
  """Checks `entries` against `model` and assigns them all, or raises without assigning; returns a
  `LoadReport`.

  `unused`: checkpoint names skipped on purpose; `path`, `kind`, `hint` (what to check) and
  `source_names` ({model name: checkpoint name}) go into messages.

  Raises:
    CheckpointError: a shape mismatch, a missing encoder variable, or a checkpoint encoder tensor
      without a place in the model.
  """
  variables = model_variables(model)
  chosen = {}
  homeless = []
  for entry in sorted(entries, key=lambda e: e.source_name):
    variable = variables.get(entry.target)
    if variable is None:
      homeless.append(entry)
      continue
    expected = _shape(variable.shape)
    if entry.target_shape != expected:
      raise CheckpointError(
          f"{path}: {entry.source_name} has shape {_shape(entry.source_shape)} but {entry.target} "
          f"needs {expected}; {hint}")
    chosen[entry.target] = entry
  if homeless:
    first = homeless[0]
    raise CheckpointError(
        f"{path}: {first.source_name} {_shape(first.source_shape)} (for {first.target}) has no "
        f"variable in the model ({len(homeless)} such tensors); {hint}")
  missing = [name for name in variables if name not in chosen and not is_optional(name)]
  if missing:
    first = missing[0]
    source = (source_names or {}).get(first)
    found = f"{source} is not in the checkpoint" if source else "the checkpoint has no value for it"
    raise CheckpointError(
        f"{path}: {first} (shape {_shape(variables[first].shape)}) is missing: {found}"
        f"{f' ({len(missing) - 1} more missing)' if len(missing) > 1 else ''}; is this a BERT "
        f"checkpoint, and {hint}")
  head = [name for name in variables if name.startswith(HEAD_PREFIX)]
  head_found = [name for name in head if name in chosen]
  if head_found and len(head_found) != len(head):
    raise CheckpointError(
        f"{path}: has {head_found[0]} but not {set(head) - set(head_found)} of the "
        f"span head; is it a complete SQuAD checkpoint?")
  for name, entry in chosen.items():
    variable = variables[name]
    variable.assign(np.asarray(entry.load()).astype(variable.dtype.as_numpy_dtype))
  new = [name for name in variables if name not in chosen]
  report = LoadReport(kind=kind, path=path, restored=sorted(chosen), new=new, unused=sorted(unused),
                      head_restored=bool(head_found))
  # The full lists (~200 names for BERT-base) only with --verbosity=1.
  logging.vlog(1, "restored from %s: %s", path, ", ".join(report.restored))
  if report.unused:
    logging.vlog(1, "unused in %s: %s", path, ", ".join(report.unused))
  return report
