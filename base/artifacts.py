"""The files of a --model_dir and of an export, named once; JSON read and written with one error
line; qa_config.json, train.py's record of the encoder, vocab, featurization and decoding settings
that export.py rebuilds the model from (and copies into the SavedModel's assets.extra).
"""

import contextlib
import errno
import json
import os
import time

from squad_qa import errors
from squad_qa.base import commands

QA_CONFIG_FILE = "qa_config.json"
TRAIN_RESULTS_FILE = "train_results.json"
LEARNING_CURVE_FILE = "learning_curve.csv"  # dev EM/F1 during training (tasks/learning_curve.py)
TRAIN_CONFIG_FILE = "train_config.json"  # the TrainConfig of the run that wrote the checkpoints
# TensorFlow's checkpoint state file: names the latest checkpoint (`model_checkpoint_path: "..."`).
CHECKPOINT_STATE_FILE = "checkpoint"
PREDICTIONS_FILE = "predictions.json"
NBEST_PREDICTIONS_FILE = "nbest_predictions.json"  # run_squad.py's n-best answers
EVAL_RESULTS_FILE = "eval_results.json"
NULL_ODDS_FILE = "null_odds.json"
EXPORT_EXTRA_DIR = "assets.extra"  # SavedModel's folder for files the loader does not read
# In a --model_dir, the lock train.py holds while it runs; an --export_dir's is beside the folder
# (`<export_dir>.in_use.lock`), since an export replaces the whole folder.
LOCK_FILE = "in_use.lock"
# The records' featurization settings a model must be served with (make_records.py's flags).
FEATURIZATION_KEYS = ("max_seq_length", "doc_stride", "max_query_length", "do_lower_case")


def not_valid_json(path, error, remedy):
  """The line saying that `path` is not JSON (`error`: its JSONDecodeError), then `remedy`."""
  return (f"{path}: not valid JSON (line {error.lineno} column {error.colno}: {error.msg}); "
          f"{remedy}")


def write_json(path, value):
  """Writes `value` as indented UTF-8 JSON to `path` (a tf.io.gfile path) via a temporary file."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  (TensorFlow-free import)
  try:
    with tf.io.gfile.GFile(path + ".tmp", "w") as f:
      json.dump(value, f, indent=2, ensure_ascii=False)
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
  except BaseException:
    if tf.io.gfile.exists(path + ".tmp"):
      tf.io.gfile.remove(path + ".tmp")
    raise


def read_json(path, remedy="write it again with the command that made it"):
  """The JSON value at `path`, or {} when there is no such file.

  Raises:
    errors.UsageError: the file is not valid JSON (`not_valid_json`).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  (TensorFlow-free import)
  if not tf.io.gfile.exists(path):
    return {}
  with tf.io.gfile.GFile(path) as f:
    text = f.read()
  try:
    return json.loads(text)
  except json.JSONDecodeError as e:
    raise errors.UsageError(not_valid_json(path, e, f"the file is damaged: {remedy}")) from None


def write_qa_config(model_dir, bert_config_file, bert_config, records_meta, decoding,
                    recorded=None):
  """Writes --model_dir/qa_config.json: the run's contract with export.py.

  Args:
    model_dir: the training run's folder.
    bert_config_file: path of the encoder's config (stored absolute).
    bert_config: its `model.bert_config.BertConfig`.
    records_meta: the records' meta.json (its "flags", "vocab_sha256", "vocab_size", and the train
      split's "input_file" and "input_sha256", recorded as train_file and train_file_sha256).
    decoding: {name: value} of the `DecodingSettings` export.py serves by default.
    recorded: where the --model_dir started (`tasks.model_dir.Start.recorded`), or None.
  """
  flags = records_meta["flags"]
  write_json(
      os.path.join(model_dir, QA_CONFIG_FILE), {
          "bert_config_file": os.path.abspath(bert_config_file),
          "bert_config": bert_config.to_dict(),
          "vocab_file": os.path.abspath(flags["vocab_file"]),
          "vocab_sha256": records_meta["vocab_sha256"],
          **({
              "vocab_size": records_meta["vocab_size"]
          } if "vocab_size" in records_meta else {}),
          **{
              k: flags[k] for k in FEATURIZATION_KEYS
          },
          **_train_file(records_meta),
          **decoding,
          **(recorded or {})
      })


def _train_file(records_meta):
  """{"train_file": path, "train_file_sha256": hex} of the SQuAD file the train records were made
  from ({} for records without a train split)."""
  train = records_meta.get("splits", {}).get("train")
  return {
      "train_file": train["input_file"],
      "train_file_sha256": train["input_sha256"]
  } if train else {}


def read_qa_config(folder):
  """`folder`/qa_config.json as a dict ({} when absent; errors as `read_json`'s)."""
  return read_json(
      os.path.join(folder, QA_CONFIG_FILE),
      f"{commands.command('squad-qa-train')} writes it with a checkpoint; restore it or train "
      f"into a new --model_dir")


def read_train_config(folder):
  """`folder`/train_config.json (the settings of the run that wrote its checkpoints) as a dict ({}
  when absent; errors as `read_json`'s)."""
  return read_json(os.path.join(folder, TRAIN_CONFIG_FILE))


def read_export_config(export_dir):
  """An export's assets.extra/qa_config.json (featurization and decoding settings).

  Raises:
    errors.MissingFileError: the export has none.
    errors.UsageError: it is not valid JSON.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  (TensorFlow-free import)
  path = os.path.join(export_dir, EXPORT_EXTRA_DIR, QA_CONFIG_FILE)
  if not tf.io.gfile.exists(path):
    raise errors.MissingFileError(
        f"{path}: not found; is {export_dir} an export of {commands.command('squad-qa-export')}?")
  return read_json(path, f"export the model again into {export_dir}")


def is_no_space(error):
  """Whether `error` (an OSError or a tf.errors.OpError) says the disk is full: TensorFlow raises
  a ResourceExhaustedError whose message ends "No space left on device", Python an ENOSPC."""
  return getattr(error, "errno", None) == errno.ENOSPC or "No space left on device" in str(error)


def not_writable(flag, folder, error):
  """The `errors.NotWritableError` for `--flag=folder` that `error` (an OSError) could not write."""
  return errors.NotWritableError(
      f"--{flag}={folder} is not writable ({error.strerror or error}); make it writable or pass "
      f"another --{flag}")


def _is_local(folder):
  return "://" not in folder


@contextlib.contextmanager
def folder_lock(flag, folder, holder, beside=False):
  """Within: this process alone writes `--flag=folder`, through an exclusive `fcntl.flock` on
  LOCK_FILE in it (`beside`: `<folder>.in_use.lock` next to it). The OS drops the lock when the
  process ends, killed or not; on exit the lock file is removed, and so are the folders this call
  made for it (`folder`, or its parent when `beside`, and their missing parents) while nothing was
  written into them: a run refused inside leaves no trace. A process that locked a removed lock
  file locks again. Remote (gs://...) folders are not locked.

  Args:
    flag: the flag naming the folder, e.g. "model_dir".
    folder: its path.
    holder: how another process's refusal names this one, e.g. "python train.py".

  Raises:
    errors.FolderInUseError: another process holds the lock (one line naming it and the fix).
    errors.NotWritableError: the folder or its lock cannot be made.
  """
  if not _is_local(folder):
    yield
    return
  import fcntl  # pylint: disable=g-import-not-at-top  (POSIX only, as the locks are)
  folder = folder.rstrip("/") or "/"
  path = folder + "." + LOCK_FILE if beside else os.path.join(folder, LOCK_FILE)
  made = set()  # folders made for the lock file, removed on exit if still empty
  attempts = 0
  while True:
    attempts += 1
    try:
      lock_folder = os.path.dirname(os.path.abspath(path))
      made.update(missing_folders(lock_folder))
      os.makedirs(lock_folder, exist_ok=True)
      fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except FileExistsError:  # a file where a folder of the path should be
      raise not_writable(flag, folder, NotADirectoryError(errno.ENOTDIR,
                                                          os.strerror(errno.ENOTDIR))) from None
    except FileNotFoundError as e:  # the folder's last holder removed it after makedirs
      if attempts < 3:
        continue
      raise not_writable(flag, folder, e) from None
    except OSError as e:
      raise not_writable(flag, folder, e) from None
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      owner = _holder(fd) or "another process"
      os.close(fd)
      raise errors.FolderInUseError(
          f"--{flag}={folder} is in use by {owner}; wait for it to finish or pass another "
          f"--{flag}") from None
    try:  # a lock file its holder removed before this process locked it locks nothing
      if os.fstat(fd).st_ino == os.stat(path).st_ino:
        break
    except FileNotFoundError:
      pass
    os.close(fd)
  try:
    with contextlib.suppress(OSError):  # naming the holder is a courtesy (a full disk refuses it)
      os.ftruncate(fd, 0)
      os.pwrite(fd, f"{holder} (pid {os.getpid()})".encode(), 0)
    yield
  finally:
    with contextlib.suppress(OSError):
      os.unlink(path)  # before the unlock: a process that opened it meanwhile sees it gone
    os.close(fd)
    remove_empty_folders(sorted(made, key=len, reverse=True))  # deepest first


def remove_empty_folders(folders):
  """Removes `folders` (paths, deepest first) in order while they are empty; stops at the first
  that is not (written into, or holding another process's lock file), which keeps its parents."""
  for folder in folders:
    try:
      os.rmdir(folder)
    except OSError:
      break


def missing_folders(folder):
  """`folder` (absolute) and those of its parents that do not exist, deepest first."""
  missing = []
  while not os.path.lexists(folder) and os.path.dirname(folder) != folder:
    missing.append(folder)
    folder = os.path.dirname(folder)
  return missing


def _holder(fd):
  """The holder a lock file names; its holder writes that just after locking it, so an empty file
  is read again once shortly after."""
  for wait in (0, 0.05):
    time.sleep(wait)
    owner = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    if owner:
      return owner
  return None
