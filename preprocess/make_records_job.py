"""The records job (`make_records`): SQuAD JSON -> sharded TFRecords of windowed features, plus
meta.json.

Shards are written under temporary names; only when all are complete are the old meta.json and
shards removed, the new shards renamed into place and meta.json written. Killed at any moment, the
output holds the previous complete output or no meta.json, never a half-written shard.

A run that makes one split keeps the other split's records already in the folder when they share
its featurization (the new meta.json lists both), and refuses when they do not: replacing the
folder's output would delete records the user did not ask to remake.
"""

import collections
import json
import os
import resource
import time

from absl import logging
import tensorflow as tf

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.base import commands
from squad_qa.base.wording import counted
from squad_qa.preprocess import features
from squad_qa.preprocess import records
from squad_qa.preprocess import records_config
from squad_qa.preprocess import shard_writer
from squad_qa.preprocess import squad_reader
from squad_qa.preprocess import wordpiece

# The config's fields that shape the features, in meta.json's "flags" order.
FEATURIZATION_FIELDS = ("vocab_file", "do_lower_case", "max_seq_length", "doc_stride",
                        "max_query_length", "num_shards", "version_2_with_negative")
RecordsConfig = records_config.RecordsConfig


class OutputDirError(errors.UserError, OSError):
  """--output_dir cannot be made or written (a file in the way, no permission)."""


class FileAccessError(errors.UserError, OSError):
  """A file the job reads or writes failed at the operating-system level (permission, disk full)."""


def _resolve_inputs(config):
  """{split: path} of the SQuAD files to featurize.

  Raises:
    errors.MissingFileError: a file (given, or the default under $SQUAD_DIR) is missing.
  """
  explicit = {records.TRAIN_SPLIT: config.train_file, records.EVAL_SPLIT: config.predict_file}
  if not any(explicit.values()):
    explicit = {
        records.TRAIN_SPLIT: squad_reader.default_squad_file(squad_reader.TRAIN_FILE_NAMES),
        records.EVAL_SPLIT: squad_reader.default_squad_file(squad_reader.PREDICT_FILE_NAMES)
    }
  inputs = {}
  for split, path in explicit.items():
    if not path:
      continue
    flag = _input_flag(split)
    if not os.path.exists(path):
      raise errors.MissingFileError(squad_reader.missing_squad_file_message(flag, path))
    inputs[split] = path
  return inputs


def _refuse_a_file_in_the_way(output_dir):
  """Raises OutputDirError when `output_dir` or a folder above it is a file (checked before the
  inputs are read, so that a mistyped path costs no work)."""
  path = os.path.abspath(output_dir)
  while not os.path.exists(path) and os.path.dirname(path) != path:
    path = os.path.dirname(path)
  if not os.path.isdir(path):
    shown = output_dir if path == os.path.abspath(output_dir) else path
    raise OutputDirError(f"--output_dir={output_dir}: {shown} is a file, not a folder; pass a "
                         f"folder you can write to (it is made when missing)")


def _prepare_output_dir(output_dir):
  """Creates `output_dir` if needed and checks that this process may write there.

  Raises:
    OutputDirError: a file is in the way, or no permission; the message names the path and the fix.
  """
  try:
    os.makedirs(output_dir, exist_ok=True)
  except OSError as e:
    raise OutputDirError(f"--output_dir={output_dir}: cannot make that folder ({e.strerror}); "
                         f"pass a folder you can write to (it is made when missing)") from None
  if not os.access(output_dir, os.W_OK | os.X_OK):
    raise OutputDirError(f"--output_dir={output_dir}: not writable (permission denied); pass a "
                         f"folder you can write to")


def _read_old_meta(output_dir):
  """`records.read_meta` of `output_dir`, else None (none, damaged, or of another format: nothing a
  reader could use)."""
  try:
    return records.read_meta(output_dir)
  except (errors.UserError, tf.errors.OpError, AttributeError):  # AttributeError: not a dict
    return None


def _kept_splits(config, inputs, vocab_sha256):
  """{split: meta.json entry} of the records in --output_dir of the splits this run does not make,
  to keep beside the new ones; `vocab_sha256` is this run's vocab's.

  Raises:
    errors.OutputExistsError: they were made with other featurization flags or another vocab; one
      line naming the differences and the fixes (the commit would otherwise delete them).
  """
  old_meta = _read_old_meta(config.output_dir)
  splits = old_meta.get("splits") if old_meta else None
  if not isinstance(splits, dict):
    return {}
  others = {
      s: info for s, info in splits.items()
      if s in (records.TRAIN_SPLIT, records.EVAL_SPLIT) and s not in inputs
  }
  if not others:
    return {}
  old_flags = old_meta.get("flags") or {}
  differences = [
      f"{name}={old_flags.get(name)} (this run: {getattr(config, name)})"
      for name in FEATURIZATION_FIELDS
      if name != "vocab_file" and old_flags.get(name) != getattr(config, name)
  ]
  if old_meta.get("vocab_sha256") != vocab_sha256:
    differences.append(f"the vocab {old_flags.get('vocab_file')} (this run's {config.vocab_file} "
                       f"differs)")
  if differences:
    flags = " and ".join(f"--{_input_flag(s)}" for s in sorted(others))
    raise errors.OutputExistsError(
        f"--output_dir={config.output_dir}: holds {' and '.join(sorted(others))} records made "
        f"with {', '.join(differences)}, which this run would delete; pass the same flags to add "
        f"the new records beside them, pass {flags} too to remake all, or pass another "
        f"--output_dir")
  for split, info in sorted(others.items()):
    logging.info("%s: kept the records already in %s (from %s; same featurization)", split,
                 config.output_dir, info.get("input_file"))
  return others


def _input_flag(split):
  """The flag naming the SQuAD file of `split`."""
  return "train_file" if split == records.TRAIN_SPLIT else "predict_file"


def _commit(output_dir, new_shards, meta):
  """Replaces the previous output by the new one (see the module docstring for the order); shards
  that `meta` lists (a kept split's) stay."""
  meta_path = os.path.join(output_dir, records.META_FILE)
  listed = {n for info in meta["splits"].values() for n in info["shards"]}
  old_shards = []
  if tf.io.gfile.exists(meta_path):
    try:
      with tf.io.gfile.GFile(meta_path, "r") as f:
        old_meta = json.load(f)
      old_shards = [
          n for info in old_meta.get("splits", {}).values() for n in info.get("shards", [])
      ]
    except (ValueError, KeyError, AttributeError, TypeError):
      pass
    tf.io.gfile.remove(meta_path)
  for name in old_shards:
    if name not in listed and os.path.basename(name) == name:
      path = os.path.join(output_dir, name)
      if tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)
  job_pid = os.getpid()
  for name in new_shards:
    tf.io.gfile.rename(shard_writer.temp_path(output_dir, name, job_pid),
                       os.path.join(output_dir, name), overwrite=True)
  with tf.io.gfile.GFile(meta_path + ".tmp", "w") as f:
    json.dump(meta, f, indent=2)
  tf.io.gfile.rename(meta_path + ".tmp", meta_path, overwrite=True)


def _read_splits(inputs, config):
  """[(split, squad_reader.SquadFile)] of every input; one line when one has no usable question."""
  splits = []
  for split, path in inputs.items():
    squad = squad_reader.read_squad(path, is_training=split == records.TRAIN_SPLIT,
                                    version_2_with_negative=config.version_2_with_negative,
                                    scored=split == records.EVAL_SPLIT)
    unanswerable = squad.skipped.get("unanswerable_needs_version_2", 0)
    if unanswerable:
      # Hugging Face rows have no is_impossible field: theirs are the rows without answers.
      what = (f"{counted(unanswerable, 'row')} {'has' if unanswerable == 1 else 'have'} no answers"
              if squad.notes.get("hugging_face_rows_grouped") else
              f"{counted(unanswerable, 'question')} {'is' if unanswerable == 1 else 'are'} marked "
              f"\"is_impossible\": true")
      raise squad_reader.SquadInputError(
          f"{path}: {what} (SQuAD 2.0's unanswerable questions; the first: "
          f"{squad.first_skipped['unanswerable_needs_version_2']}), which SQuAD 1.1 records cannot "
          f"hold; pass --version_2_with_negative")
    if not squad.examples:
      _refuse_unusable(split, squad, squad.skipped)
    _warn_of_the_version(path, squad, config.version_2_with_negative)
    splits.append((split, squad))
  return splits


def _warn_of_the_version(path, squad, version_2_with_negative):
  """Logs a warning when `squad` (a read SQuAD file) looks like the other SQuAD version: training
  questions without answers skipped under SQuAD 1.1, or no unanswerable question under 2.0."""
  no_answer = squad.skipped.get("no_answer", 0)
  if no_answer and not version_2_with_negative:
    logging.warning(
        "%s: %s without answers skipped (the first: %s); if they are SQuAD 2.0's unanswerable "
        "questions, --version_2_with_negative trains them as such", path,
        counted(no_answer, "question"), squad.first_skipped["no_answer"])
  unanswerable = (squad.notes.get("unanswerable", 0) +
                  squad.notes.get("answerable_without_answers_scored_as_unanswerable", 0))
  if version_2_with_negative and not unanswerable:
    logging.warning(
        "%s: --version_2_with_negative, but none of its %s is unanswerable (\"is_impossible\": "
        "true, or no answers): the model would learn and be scored on no null answer; SQuAD 1.1 "
        "data needs no flag", path, counted(len(squad.examples), "question"))


def _refuse_unusable(split, squad, skipped):
  """Raises the one line of a split left without a usable question by `skipped` (by reason)."""
  reasons = ", ".join(f"{k}: {v}" for k, v in sorted(skipped.items()) if v) or "no questions"
  raise squad_reader.SquadInputError(f"{squad.path}: no usable {split} questions ({reasons})")


def _check_usable(split, squad, total):
  """Refuses a split whose questions featurizing skipped all (`_refuse_unusable`)."""
  if not total.num_examples:
    _refuse_unusable(split, squad, collections.Counter(squad.skipped) + total.skipped)


def _split_meta(split, squad, total, num_shards):
  """meta.json's entry of one split (and the log lines about it)."""
  skipped = collections.Counter(squad.skipped)
  skipped.update(total.skipped)
  notes = collections.Counter(squad.notes)
  notes.update(total.notes)
  info = {
      "input_file": os.path.abspath(squad.path),
      "input_sha256": wordpiece.file_sha256(squad.path),
      "num_examples": total.num_examples,
      "num_features": total.num_features,
      "skipped": {
          k: v for k, v in sorted(skipped.items()) if v
      },
      "notes": {
          k: v for k, v in sorted(notes.items()) if v
      },
      "shards": [records.shard_name(split, i, num_shards) for i in range(num_shards)],
  }
  if info["skipped"]:
    logging.warning("%s: skipped (questions, and paragraphs without questions) by reason: %s",
                    split, info["skipped"])
  first_skipped = {
      **squad.first_skipped,
      **{
          reason: f"id {qas_id}" for reason, (_, qas_id) in total.first_skipped.items()
      }
  }
  if first_skipped:
    logging.warning(
        "%s: the first question of %s skipped for each reason: %s", split, squad.path,
        "; ".join(f"{reason}: {place}" for reason, place in sorted(first_skipped.items())))
  in_no_window = skipped.get("answer_in_no_window", 0)
  if in_no_window:
    logging.warning(
        "%s: %d of %d answers lie whole in no window (across window boundaries; skipped); "
        "--doc_stride=%d or less puts every answer that fits a window whole in one", split,
        in_no_window, total.num_answers, total.safe_doc_stride)
  if info["notes"]:
    logging.info("%s: notes (kept questions, normalized input): %s", split, info["notes"])
  logging.info("%s: %s -> %s", split, counted(total.num_examples, "question"),
               counted(total.num_features, "window"))
  return info


def make_records(config):
  """The whole job: read, featurize, write shards, commit, write meta.json.

  Args:
    config: RecordsConfig (num_workers > 1 forks: call it before TensorFlow has run).

  Returns:
    The meta dict written to `<output_dir>/meta.json`.

  Raises:
    errors.MissingFileError: an input file is missing; nothing is written.
    errors.UsageError: `do_lower_case` contradicts the vocab's casing; nothing is written.
    errors.OutputExistsError: the output_dir holds records of the split this run does not make,
      with other featurization flags (`_kept_splits`); nothing is written.
    squad_reader.SquadInputError: bad input (one line); nothing is written.
    OutputDirError: --output_dir cannot be made or written.
    errors.FolderInUseError: another run is writing --output_dir; nothing is written.
    shard_writer.WorkerError: a worker failed; nothing is written.
    FileAccessError: reading an input or writing the output failed at the system level.
  """
  try:
    return _make_records(config)
  except errors.UserError:
    raise
  except OSError as e:
    raise FileAccessError(str(e).splitlines()[0] if str(e) else type(e).__name__) from e


def _make_records(config):
  """`make_records` without the conversion of system errors."""
  vocab = wordpiece.read_vocab(config.vocab_file)
  wordpiece.check_casing(vocab, config.vocab_file, config.do_lower_case)
  inputs = _resolve_inputs(config)
  vocab_sha256 = wordpiece.vocab_sha256(vocab)
  output_dir = config.output_dir
  _refuse_a_file_in_the_way(output_dir)
  started = time.time()
  started_cpu = cpu_seconds()
  splits = _read_splits(inputs, config)
  features.warn_if_stride_clamped(config)
  logging.info("read %s in %.1f s",
               ", ".join(f"{s}: {counted(len(q.examples), 'usable question')}" for s, q in splits),
               time.time() - started)
  made = artifacts.missing_folders(os.path.abspath(output_dir))  # deepest first
  _prepare_output_dir(output_dir)
  try:
    # One run at a time writes the folder: two would each commit, the last one's meta.json and
    # shards silently replacing the other's.
    with artifacts.folder_lock("output_dir", output_dir, commands.command("squad-qa-records")):
      kept = _kept_splits(config, inputs, vocab_sha256)  # under the lock: what stays is decided
      meta, totals = _write_splits(config, splits, kept, len(vocab), vocab_sha256)
  except BaseException:  # refused, failed or interrupted: the folders this run made go if empty
    artifacts.remove_empty_folders(made)
    raise
  elapsed = time.time() - started
  num_questions = sum(len(squad.examples) for _, squad in splits)
  logging.info(
      "done in %.1f s (%.0f questions/s; %.1f CPU seconds with the workers): %s; the "
      "shards and %s in %s", elapsed, num_questions / max(elapsed, 1e-9),
      cpu_seconds() - started_cpu,
      ", ".join(f"{split}: {counted(totals[split].num_examples, 'question')} -> "
                f"{counted(totals[split].num_features, 'window')}{_skipped_count(meta, split)}"
                for split, _ in splits), records.META_FILE, output_dir)
  return meta


def _write_splits(config, splits, kept, vocab_size, vocab_sha256):
  """Featurizes `splits` into temporary shards, then commits them and meta.json (with the `kept`
  splits' entries) into config.output_dir; returns (meta, {split: featurization totals})."""
  output_dir = config.output_dir
  shard_writer.remove_stale_temp_files(output_dir)
  new_shards = [
      records.shard_name(split, i, config.num_shards) for split, _ in splits
      for i in range(config.num_shards)
  ]
  try:
    totals = shard_writer.featurize(splits, config, output_dir, config.num_workers)
    for split, squad in splits:
      _check_usable(split, squad, totals[split])
  except BaseException:
    for name in new_shards:
      path = shard_writer.temp_path(output_dir, name, os.getpid())
      if os.path.exists(path):
        os.remove(path)
    raise
  made = {
      split: _split_meta(split, squad, totals[split], config.num_shards) for split, squad in splits
  }
  made.update(kept)
  meta = {
      "format_version": records.FORMAT_VERSION,
      "flags": {
          name: getattr(config, name) for name in FEATURIZATION_FIELDS
      },
      "vocab_sha256": vocab_sha256,
      "vocab_size": vocab_size,  # token ids are below it
      "splits": {  # train first, as a run making both writes them
          split: made[split]
          for split in sorted(made, key=(records.TRAIN_SPLIT, records.EVAL_SPLIT).index)
      },
  }
  _commit(output_dir, new_shards, meta)
  return meta, totals


def _skipped_count(meta, split):
  """' (N skipped)' (questions and paragraphs without one) of a split of `meta`, '' for none."""
  skipped = sum(meta['splits'][split]['skipped'].values())
  return f" ({skipped:,} skipped)" if skipped else ""


def cpu_seconds():
  """User + system CPU seconds of this process and of its finished (joined) worker processes."""
  own = resource.getrusage(resource.RUSAGE_SELF)
  children = resource.getrusage(resource.RUSAGE_CHILDREN)
  return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
