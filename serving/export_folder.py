"""The --export_dir while export.py writes it: one export at a time (a lock beside the folder),
the checkpoint it reads pinned against training deleting it, the new export written under a
temporary name and swapped in, and a full disk reported in one line with the partial files removed.

Beside `<export_dir>`, while an export runs: `<export_dir>.in_use.lock`, `.tmp-export` (the new
export), `.tmp-checkpoint` (the pinned checkpoint) and, for an instant, `.old-export` (the export
being replaced). Killed at any moment, the next export.py finds `<export_dir>` complete (the old or
the new one) or puts the old one back.
"""

import contextlib
import os
import shutil

from absl import logging
import tensorflow as tf

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.base import commands
from squad_qa.tasks import model_dir as model_dir_lib

TEMP_SUFFIX = ".tmp-export"
OLD_SUFFIX = ".old-export"
PINNED_SUFFIX = ".tmp-checkpoint"
# Tries to pin the latest checkpoint of a --model_dir that training keeps replacing.
_PIN_ATTEMPTS = 3


def _beside(export_dir, suffix):
  return export_dir.rstrip("/") + suffix


def followed(export_dir):
  """`export_dir`, or the folder it names when it is a symbolic link: the export then replaces that
  folder, which the link keeps naming, and locks it there, as an export through any other path to
  it does (replacing the link itself would leave the old link aside and lock another path)."""
  if "://" in export_dir or not os.path.islink(export_dir.rstrip("/")):
    return export_dir
  return os.path.realpath(export_dir)


@contextlib.contextmanager
def writing(export_dir):
  """Within: this process alone writes `export_dir` (`artifacts.folder_lock`), an export a kill
  left half-swapped is put back, and stale temporary folders are gone (also on exit).

  Raises:
    errors.FolderInUseError: another export.py writes `export_dir`.
    errors.NotWritableError: the folder beside which `export_dir` goes cannot be written.
  """
  with artifacts.folder_lock("export_dir", export_dir, commands.command("squad-qa-export"),
                             beside=True):
    old = _beside(export_dir, OLD_SUFFIX)
    if os.path.isdir(old):
      if os.path.lexists(export_dir):
        shutil.rmtree(old)
      else:  # killed between the two renames of `replace`
        os.rename(old, export_dir)
    temps = [_beside(export_dir, TEMP_SUFFIX), _beside(export_dir, PINNED_SUFFIX)]
    for temp in temps:
      shutil.rmtree(temp, ignore_errors=True)
    try:
      yield
    finally:
      for temp in temps:
        shutil.rmtree(temp, ignore_errors=True)


def temp_dir(export_dir):
  """The folder the new export is written into (renamed to `export_dir` by `replace`)."""
  return _beside(export_dir, TEMP_SUFFIX)


def replace(export_dir):
  """Moves the complete export at `temp_dir(export_dir)` to `export_dir`, the previous export
  aside first and removed last (so a kill leaves one whole export; see `writing`)."""
  old = _beside(export_dir, OLD_SUFFIX)
  replacing = os.path.lexists(export_dir)
  if replacing:
    os.rename(export_dir, old)
  os.rename(temp_dir(export_dir), export_dir)
  shutil.rmtree(old, ignore_errors=True)
  if replacing:
    logging.info("replaced the earlier export in %s", export_dir)


@contextlib.contextmanager
def no_space_reported(export_dir):
  """Within: a full disk raises `errors.NoSpaceError` (one line) once the partial export is
  removed; any failure removes it."""
  try:
    yield
  except BaseException as e:
    shutil.rmtree(temp_dir(export_dir), ignore_errors=True)
    if isinstance(e,
                  (tf.errors.OpError,
                   OSError)) and not isinstance(e, errors.UserError) and artifacts.is_no_space(e):
      kept = ("the earlier export there is intact"
              if os.path.isdir(export_dir) else "nothing was written")
      raise errors.NoSpaceError(
          f"--export_dir={export_dir}: no space left on the device while writing the export (its "
          f"partial files are removed; {kept}); free space or pass another --export_dir") from None
    raise


def _link_checkpoint(prefix, folder):
  """Hard-links the files of checkpoint `prefix` into `folder`; returns the linked prefix, or
  `prefix` itself when `folder` is on another file system (copying could take gigabytes).

  Raises:
    FileNotFoundError: a file vanished meanwhile (training's checkpoint manager deleted it).
  """
  shutil.rmtree(folder, ignore_errors=True)
  os.makedirs(folder)
  files = tf.io.gfile.glob(prefix + ".*")
  if not any(path.endswith(".index") for path in files):
    raise FileNotFoundError(prefix + ".index")
  for path in files:
    try:
      os.link(path, os.path.join(folder, os.path.basename(path)))
    except FileNotFoundError:
      raise
    except OSError:  # another file system, or one without hard links
      shutil.rmtree(folder, ignore_errors=True)
      return prefix
  return os.path.join(folder, os.path.basename(prefix))


def pinned_start(model_dir, init_checkpoint, export_dir):
  """`tasks.model_dir.decide_start`'s start and the checkpoint prefix to read: a resumed
  checkpoint's files hard-linked beside `export_dir` first, so that a training run saving into
  `model_dir` meanwhile cannot delete them under the read (None without a resume).

  Raises:
    errors.UsageError: training replaced the latest checkpoint `_PIN_ATTEMPTS` times in a row.
    And `decide_start`'s errors.
  """
  for _ in range(_PIN_ATTEMPTS):
    start = model_dir_lib.decide_start(model_dir, init_checkpoint)
    if not start.resume:
      return start, None
    try:
      return start, _link_checkpoint(start.resume, _beside(export_dir, PINNED_SUFFIX))
    except FileNotFoundError:
      continue
  raise deleted_while_read(model_dir)


def deleted_while_read(model_dir):
  """The `errors.UsageError` for a --model_dir checkpoint a training run deleted under the read."""
  return errors.UsageError(
      f"--model_dir={model_dir}: a training run saving into it deleted the checkpoint "
      f"{commands.command('squad-qa-export')} was reading; wait for it to finish, or pass "
      f"--init_checkpoint=<a checkpoint it keeps>")


def describe_progress(prefix, read_prefix):
  """One line when the --model_dir checkpoint `prefix` (read at `read_prefix`) stops before its
  schedule's end ("ckpt-10 is step 10 of a 30-step schedule: ..."), else None."""
  total = model_dir_lib.schedule_steps_in(read_prefix)
  name = os.path.basename(prefix)
  step = name.rsplit("-", 1)[-1]
  if total is None or not step.isdigit() or int(step) >= total:
    return None
  return (f"{name} is step {int(step)} of a {total}-step schedule: its training run has not "
          f"finished (export again when it has, for the final weights)")
