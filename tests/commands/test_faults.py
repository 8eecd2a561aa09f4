"""Output folders under concurrency and faults, in process: one writer per folder, a folder that
cannot be written, a full disk, damaged shards, checkpoints and exports. Each ends in one line
naming the file or folder and the fix, and leaves the previous complete output."""

import errno
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import message
from tensorflow.core.protobuf import saved_model_pb2

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.model import checkpoints
from squad_qa.preprocess import records
from squad_qa.serving import export_folder
from squad_qa.serving import saved_model_qa
from squad_qa.tasks import model_dir as model_dir_lib
from squad_qa.tasks import trainer as trainer_lib
from tests import testutil

# What TensorFlow raises when SaveV2 fills the disk (its message, shortened).
_SAVE_NO_SPACE = ("{{function_node __wrapped__SaveV2_dtypes_136_device_/job:localhost/replica:0/"
                  "task:0/device:CPU:0}} {}/ckpt-6_temp/part-00000-of-00001.data-00000-of-00001."
                  "tempstate4537859986659943287; No space left on device [Op:SaveV2]")


def test_a_second_writer_of_a_model_dir_is_refused_naming_the_first(tmp_path):
  model_dir = str(tmp_path / "model_out")
  with artifacts.folder_lock("model_dir", model_dir, "python train.py"):
    with pytest.raises(errors.FolderInUseError) as raised:
      with artifacts.folder_lock("model_dir", model_dir, "python train.py"):
        pass
  assert str(raised.value) == (
      f"--model_dir={model_dir} is in use by python train.py (pid {os.getpid()}); wait for it to "
      f"finish or pass another --model_dir")
  with artifacts.folder_lock("model_dir", model_dir, "python train.py"):  # released on exit
    assert os.listdir(model_dir) == [artifacts.LOCK_FILE]
  assert not os.path.exists(model_dir)  # made by the lock, nothing written: removed with it


def test_a_lock_leaves_a_folder_it_did_not_make_or_wrote_into_without_its_lock_file(tmp_path):
  existing = tmp_path / "existing"
  existing.mkdir()
  with artifacts.folder_lock("model_dir", str(existing), "python train.py"):
    pass
  assert existing.is_dir() and os.listdir(existing) == []
  written = tmp_path / "written"
  with artifacts.folder_lock("model_dir", str(written), "python train.py"):
    (written / "ckpt-1.index").write_text("x")
  assert os.listdir(written) == ["ckpt-1.index"]
  # Missing parents made for the folder (or, beside it, for its lock) go too; not existing ones.
  with artifacts.folder_lock("model_dir", str(existing / "a" / "b" / "run"), "python train.py"):
    assert os.path.isdir(existing / "a" / "b" / "run")
  with artifacts.folder_lock("export_dir", str(existing / "c" / "export"), "export.py",
                             beside=True):
    assert os.listdir(existing / "c") == ["export." + artifacts.LOCK_FILE]
  assert existing.is_dir() and os.listdir(existing) == []
  with artifacts.folder_lock("model_dir", str(existing / "a" / "run"), "python train.py"):
    (existing / "a" / "notes.txt").write_text("x")
  assert sorted(os.listdir(existing)) == ["a"] and os.listdir(existing / "a") == ["notes.txt"]


def test_an_export_dir_lock_is_beside_the_folder_and_removed_after(tmp_path):
  export_dir = str(tmp_path / "export")
  with export_folder.writing(export_dir):
    assert os.listdir(tmp_path) == ["export." + artifacts.LOCK_FILE]
    with pytest.raises(
        errors.FolderInUseError,
        match=r"^--export_dir=.*/export is in use by squad-qa-export \(pid \d+\); "
        r"wait for it to finish or pass another --export_dir$"):
      with export_folder.writing(export_dir):
        pass
  assert os.listdir(tmp_path) == []


def test_a_killed_holder_leaves_no_lock_behind(tmp_path):
  model_dir = str(tmp_path / "model_out")
  holder = subprocess.Popen([
      sys.executable, "-c", "import sys, time\n"
      "from squad_qa.base import artifacts\n"
      f"with artifacts.folder_lock('model_dir', {model_dir!r}, 'python train.py'):\n"
      "  print('locked', flush=True)\n"
      "  time.sleep(600)\n"
  ], cwd=testutil.REPO, stdout=subprocess.PIPE, text=True)
  assert holder.stdout.readline() == "locked\n"
  with pytest.raises(errors.FolderInUseError, match=rf"pid {holder.pid}\)"):
    with artifacts.folder_lock("model_dir", model_dir, "python train.py"):
      pass
  holder.send_signal(signal.SIGKILL)
  holder.wait()
  with artifacts.folder_lock("model_dir", model_dir, "python train.py"):
    pass


def test_a_folder_that_cannot_be_made_is_not_writable_before_any_work(tmp_path):
  (tmp_path / "a_file").write_text("x")
  with pytest.raises(errors.NotWritableError) as raised:
    with artifacts.folder_lock("model_dir", str(tmp_path / "a_file" / "model_out"), "train.py"):
      pass
  assert str(raised.value) == (f"--model_dir={tmp_path}/a_file/model_out is not writable (Not a "
                               f"directory); make it writable or pass another --model_dir")
  with pytest.raises(errors.NotWritableError, match=r"^--export_dir=.* is not writable \(Not a "):
    with export_folder.writing(str(tmp_path / "a_file" / "export")):
      pass


@pytest.mark.skipif(os.geteuid() == 0, reason="permissions do not bind root")
def test_a_read_only_folder_is_not_writable(tmp_path):
  folder = tmp_path / "read_only"
  folder.mkdir()
  folder.chmod(0o555)
  try:
    with pytest.raises(errors.NotWritableError) as raised:
      with artifacts.folder_lock("model_dir", str(folder), "train.py"):
        pass
  finally:
    folder.chmod(0o755)
  assert str(raised.value) == (f"--model_dir={folder} is not writable (Permission denied); make "
                               f"it writable or pass another --model_dir")


def _save(folder, step, schedule_steps=None):
  """A small --model_dir checkpoint ckpt-<step> (with the schedule's length when given)."""
  values = {"model": tf.Variable(np.arange(1000, dtype=np.float32))}
  if schedule_steps:
    values[model_dir_lib.SCHEDULE_STEPS_KEY] = tf.Variable(schedule_steps, dtype=tf.int64)
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(**values), folder, max_to_keep=3)
  return manager, manager.save(checkpoint_number=step)


class _Step:
  """The part of a QATrainer the save's error handling reads."""

  def __init__(self, step):
    self.optimizer = type("Optimizer", (), {"iterations": tf.Variable(step)})()


def test_a_full_disk_while_saving_a_checkpoint_keeps_the_last_one(tmp_path):
  folder = str(tmp_path)
  manager, _ = _save(folder, 3)
  os.makedirs(tmp_path / "ckpt-6_temp")
  (tmp_path / "ckpt-6_temp" / "part-00000-of-00001.data-00000-of-00001.tempstate1").write_text("")
  (tmp_path / "ckpt-6.data-00000-of-00001").write_text("partial")
  with pytest.raises(errors.NoSpaceError) as raised:
    with trainer_lib._out_of_memory_as_error(_Step(6), manager):
      raise tf.errors.ResourceExhaustedError(None, None, _SAVE_NO_SPACE.format(folder))
  assert str(raised.value) == (
      f"--model_dir={folder}: no space left on the device while saving the checkpoint of step 6 "
      f"(its partial files are removed); the last checkpoint {folder}/ckpt-3 is intact: free "
      f"space (or pass another --model_dir) and the same command resumes from it")
  assert "memory" not in str(raised.value)
  assert sorted(os.listdir(folder)) == ["checkpoint", "ckpt-3.data-00000-of-00001", "ckpt-3.index"]
  with pytest.raises(errors.NoSpaceError, match="no checkpoint was saved yet: free space or pass"):
    with trainer_lib._out_of_memory_as_error(
        _Step(1),
        tf.train.CheckpointManager(tf.train.Checkpoint(), str(tmp_path / "empty"), max_to_keep=1)):
      raise OSError(errno.ENOSPC, "No space left on device")


def test_a_host_allocation_failure_in_a_step_is_out_of_memory(tmp_path):
  """A MemoryError (std::bad_alloc, e.g. while TensorFlow builds its own OOM error's message)
  reads as the step's out-of-memory error naming the last checkpoint, as a ResourceExhaustedError
  does."""
  manager, _ = _save(str(tmp_path), 2)
  with pytest.raises(trainer_lib.OutOfMemoryError) as raised:
    with trainer_lib._out_of_memory_as_error(_Step(2), manager):
      raise MemoryError("std::bad_alloc")
  assert str(raised.value) == (
      f"step 3 ran out of memory (a host allocation failed: std::bad_alloc); the last checkpoint "
      f"is {tmp_path}/ckpt-2, unchanged")


def test_a_full_disk_while_writing_json_leaves_no_temporary_file(tmp_path, monkeypatch):

  def full(*args, **kwargs):
    raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")

  monkeypatch.setattr(tf.io.gfile, "rename", full)
  with pytest.raises(tf.errors.ResourceExhaustedError):
    artifacts.write_json(str(tmp_path / artifacts.TRAIN_CONFIG_FILE), {"a": 1})
  assert os.listdir(tmp_path) == []


def test_a_full_disk_while_exporting_removes_the_partial_export(tmp_path):
  export_dir = str(tmp_path / "export")
  os.makedirs(os.path.join(export_dir, "variables"))
  (tmp_path / "export" / "saved_model.pb").write_text("earlier")
  with pytest.raises(errors.NoSpaceError) as raised:
    with export_folder.no_space_reported(export_dir):
      os.makedirs(os.path.join(export_folder.temp_dir(export_dir), "variables"))
      raise OSError(errno.ENOSPC, "No space left on device")
  assert str(raised.value) == (
      f"--export_dir={export_dir}: no space left on the device while writing the export (its "
      f"partial files are removed; the earlier export there is intact); free space or pass "
      f"another --export_dir")
  assert os.listdir(tmp_path) == ["export"]
  assert (tmp_path / "export" / "saved_model.pb").read_text() == "earlier"


def test_an_export_killed_between_its_renames_is_put_back(tmp_path):
  export_dir = str(tmp_path / "export")
  os.makedirs(export_dir + export_folder.OLD_SUFFIX)
  (tmp_path / ("export" + export_folder.OLD_SUFFIX) / "saved_model.pb").write_text("earlier")
  os.makedirs(export_folder.temp_dir(export_dir))
  with export_folder.writing(export_dir):
    assert sorted(os.listdir(tmp_path)) == ["export", "export." + artifacts.LOCK_FILE]
  assert (tmp_path / "export" / "saved_model.pb").read_text() == "earlier"
  os.makedirs(export_folder.temp_dir(export_dir))
  (tmp_path / ("export" + export_folder.TEMP_SUFFIX) / "saved_model.pb").write_text("new")
  export_folder.replace(export_dir)
  assert os.listdir(tmp_path) == ["export"]
  assert (tmp_path / "export" / "saved_model.pb").read_text() == "new"


def test_export_reads_a_pinned_checkpoint_that_training_cannot_delete(tmp_path):
  model_dir, export_dir = str(tmp_path / "model_out"), str(tmp_path / "export")
  _, prefix = _save(model_dir, 10, schedule_steps=30)
  start, pinned = export_folder.pinned_start(model_dir, None, export_dir)
  assert start.resume == prefix
  assert pinned == f"{export_dir}{export_folder.PINNED_SUFFIX}/ckpt-10"
  for name in os.listdir(model_dir):  # what the checkpoint manager does to ckpt-10 meanwhile
    if name.startswith("ckpt-10."):
      os.remove(os.path.join(model_dir, name))
  assert tf.train.load_checkpoint(pinned).get_tensor(
      f"{model_dir_lib.SCHEDULE_STEPS_KEY}/.ATTRIBUTES/VARIABLE_VALUE") == 30
  assert export_folder.describe_progress(prefix, pinned) == (
      "ckpt-10 is step 10 of a 30-step schedule: its training run has not finished (export "
      "again when it has, for the final weights)")
  _, last = _save(str(tmp_path / "finished"), 30, schedule_steps=30)
  assert export_folder.describe_progress(last, last) is None


@pytest.mark.parametrize("damage,line", [
    ("no_data", "{p}.data-00000-of-* is missing"),
    ("short_index", "{p}.index is damaged (not an sstable (bad magic number))"),
    ("short_data", "{p}.data-00000-of-00001 is truncated (100 bytes, its tensors take 4,008)"),
])
def test_a_damaged_checkpoint_is_named_with_how_to_continue(tmp_path, damage, line):
  model_dir = str(tmp_path)
  _save(model_dir, 3)
  _, prefix = _save(model_dir, 6)
  if damage == "no_data":
    os.remove(prefix + ".data-00000-of-00001")
  else:
    path = prefix + (".index" if damage == "short_index" else ".data-00000-of-00001")
    os.truncate(path, 100)
  with pytest.raises(checkpoints.CheckpointError) as raised:
    model_dir_lib.decide_start(model_dir, None)
  assert str(raised.value) == (
      line.format(p=prefix) + f": --model_dir={model_dir} cannot continue from ckpt-6; delete "
      f"{prefix}.* and edit {model_dir}/checkpoint to name ckpt-3: squad-qa-train resumes from "
      f"it and writes ckpt-6 again")


def _shard_meta(records_dir, num_records):
  """A train shard of `num_records` small records and its meta dict."""
  name = records.shard_name(records.TRAIN_SPLIT, 0, 1)
  with tf.io.TFRecordWriter(os.path.join(records_dir, name)) as writer:
    for i in range(num_records):
      writer.write(b"record %d" % i)
  return {"splits": {records.TRAIN_SPLIT: {"shards": [name]}}}


def test_a_truncated_shard_is_named_with_the_command_that_writes_it(tmp_path):
  meta = _shard_meta(tmp_path, 10)
  assert records.damaged_shard_error(str(tmp_path), meta) is None
  shard = tmp_path / meta["splits"]["train"]["shards"][0]
  os.truncate(shard, os.path.getsize(shard) - 5)
  assert str(records.damaged_shard_error(str(tmp_path), meta)) == (
      f"{shard}: damaged shard (truncated record at 216); write the records again: rerun "
      f"`squad-qa-records --output_dir={tmp_path}` with the input files and flags of its meta.json")


def _small_export(export_dir, vocab):
  module = tf.Module()
  module.vocab_file = tf.saved_model.Asset(vocab)
  module.weights = tf.Variable(np.arange(1000, dtype=np.float32))
  tf.saved_model.save(module, export_dir)


def _protobuf_reason(path):
  """The last clause of protobuf's own error parsing the SavedModel file `path`, as TensorFlow
  passes it on: "Wire format was corrupt." from protobuf 7, the whole "Error parsing message with
  type 'tensorflow.SavedModel'." from protobuf 6 (what Python 3.10 installs)."""
  with open(path, "rb") as f:
    data = f.read()
  with pytest.raises(message.DecodeError) as error:
    saved_model_pb2.SavedModel().ParseFromString(data)
  return str(error.value).rsplit(": ", 1)[-1] + "."


@pytest.mark.parametrize("damage,what", [
    ("no_variables", "{e}/variables/variables.data-00000-of-* is missing"),
    ("short_pb", "{e}/saved_model.pb or its variables cannot be read ({reason})"),
    ("no_vocab", "{e}/assets/vocab.txt is missing"),
])
def test_ask_names_a_damaged_export_and_the_export_command(tmp_path, damage, what):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n")
  export_dir = str(tmp_path / "export")
  _small_export(export_dir, str(vocab))
  if damage == "no_variables":
    os.remove(os.path.join(export_dir, "variables", "variables.data-00000-of-00001"))
  elif damage == "short_pb":
    os.truncate(os.path.join(export_dir, "saved_model.pb"), 100)
    what = what.replace("{reason}", _protobuf_reason(os.path.join(export_dir, "saved_model.pb")))
  else:
    os.remove(os.path.join(export_dir, "assets", "vocab.txt"))
  with pytest.raises(saved_model_qa.DamagedExportError) as raised:
    saved_model_qa.load_saved_model(export_dir)
  assert str(raised.value) == (
      f"--export_dir={export_dir}: damaged export ({what.format(e=export_dir)}); write it again "
      f"with `squad-qa-export --export_dir={export_dir}` and the --model_dir or --init_checkpoint "
      f"it was made from")


def test_train_names_the_damaged_shard_behind_a_data_loss_error(tmp_path):
  from squad_qa.tasks import train_and_evaluate  # pylint: disable=g-import-not-at-top
  meta = _shard_meta(tmp_path, 10)
  shard = tmp_path / meta["splits"]["train"]["shards"][0]
  os.truncate(shard, os.path.getsize(shard) - 5)
  config = type("Config", (), {"records_dir": str(tmp_path), "model_dir": str(tmp_path / "m")})
  with pytest.raises(records.DamagedShardError, match=rf"^{shard}: damaged shard \(truncated"):
    with train_and_evaluate._output_errors(config, meta):
      raise tf.errors.DataLossError(None, None, "truncated record at 216")
  with pytest.raises(errors.NoSpaceError) as raised:
    with train_and_evaluate._output_errors(config, meta):
      raise OSError(errno.ENOSPC, "No space left on device")
  assert str(raised.value) == (f"--model_dir={tmp_path}/m: no space left on the device; free "
                               f"space (or pass another --model_dir) and run the same command "
                               f"again")
