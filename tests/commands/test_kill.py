"""kill -9 while a command writes: each output is written under a temporary name and renamed into
place, so a kill at any moment leaves the previous complete output (or none) and the same command
redoes or resumes it. Each test kills one command at a moment per seed (a given log line, then a
delay drawn from the seed), checking what is left after each kill, then lets it finish."""

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from squad_qa.base import artifacts
from squad_qa.model import checkpoints
from squad_qa.preprocess import records
from tests import testutil

SEEDS = (0, 1, 2)  # each seed is a kill at another moment


def kill_when(argv, line, seed, log, max_delay, timeout=600):
  """Starts `python argv` in its own process group, output to file `log`; once `line` is in its
  output, waits a delay drawn from `seed` (up to `max_delay` seconds) and SIGKILLs the group.
  Returns the exit status (-SIGKILL when killed; 0 when it finished first)."""
  delay = random.Random(seed).uniform(0, max_delay)
  with open(log, "w") as out:
    proc = subprocess.Popen([sys.executable, *argv], cwd=testutil.REPO, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None and line not in log.read_text():
      time.sleep(0.1)
    time.sleep(delay)
    if proc.poll() is None:
      os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=timeout)
  return proc.returncode


def tree_sha256(folder):
  """{relative path: SHA-256} of every file under `folder`."""
  found = {}
  for root, _, names in os.walk(folder):
    for name in names:
      path = os.path.join(root, name)
      with open(path, "rb") as f:
        found[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
  return found


@pytest.mark.slow
def test_make_records_killed_leaves_the_previous_output_and_redoes_it(tmp_path):
  train = testutil.write_squad_slice(testutil.TRAIN_FILE, tmp_path / "train.json", 300)
  out = tmp_path / "records"
  argv = [
      "preprocess/make_records.py", f"--train_file={train}",
      f"--vocab_file={testutil.vocab_file()}", "--max_seq_length=64", "--doc_stride=32",
      "--max_query_length=16", "--num_shards=2", f"--output_dir={out}"
  ]
  testutil.run_cli(*argv)
  complete = tree_sha256(out)
  for seed in SEEDS:
    kill_when(argv, "read train:", seed, tmp_path / "records.log", max_delay=4)
    # Hidden temporary shards of the killed job (`.<shard>.tmp-<pid>`) are read by nothing and
    # removed by the next run, as is the lock file of a job killed while it held the folder (the
    # OS dropped its lock); the rest is the previous output, or has no meta.json (readers refuse
    # the folder); never a half shard under a shard's name.
    left = {
        name: sha for name, sha in tree_sha256(out).items()
        if not re.fullmatch(r"\..+\.tmp-\d+", name) and name != artifacts.LOCK_FILE
    }
    assert left == complete or (records.META_FILE not in left and
                                all(left[name] == complete[name] for name in left)), seed
  testutil.run_cli(*argv)
  assert tree_sha256(out) == complete


@pytest.mark.slow
def test_train_killed_resumes_to_the_same_final_step(tmp_path):
  records_dir = testutil.make_train_records(tmp_path, 24)
  model_dir = tmp_path / "model_out"
  argv = [
      "train.py", f"--records_dir={records_dir}", f"--model_dir={model_dir}",
      f"--bert_config_file={testutil.write_tiny_config(tmp_path / 'bert_config.json')}",
      f"--vocab_file={testutil.vocab_file()}", "--max_steps=8", "--train_batch_size=8",
      "--steps_per_loop=1", "--save_checkpoints_steps=2", "--do_predict=false"
  ]
  for seed in SEEDS:
    kill_when(argv, "saved checkpoint", seed, tmp_path / "train.log", max_delay=3)
    latest = checkpoints.latest_checkpoint(str(model_dir))
    assert latest and checkpoints.damage(latest) is None, seed  # the last one is whole
    with open(model_dir / "train_config.json") as f:
      assert json.load(f)["max_steps"] == 8
  _, output = testutil.run_cli(*argv)
  assert "resumed from" in output or "already trained 8 of 8 steps" in output
  assert os.path.basename(checkpoints.latest_checkpoint(str(model_dir))) == "ckpt-8"
  assert not [name for name in os.listdir(model_dir) if "temp" in name or ".tmp" in name]
  # The same weights as a run never killed: a resume restores the input's and dropout's state.
  whole_dir = tmp_path / "uninterrupted"
  testutil.run_cli(
      *[f"--model_dir={whole_dir}" if a.startswith("--model_dir=") else a for a in argv])
  killed = tf.train.load_checkpoint(str(model_dir / "ckpt-8"))
  whole = tf.train.load_checkpoint(str(whole_dir / "ckpt-8"))
  names = [n for n in whole.get_variable_to_shape_map() if n.startswith("model/")]
  assert len(names) > 20
  for name in names:
    np.testing.assert_array_equal(killed.get_tensor(name), whole.get_tensor(name), err_msg=name)


@pytest.mark.slow
def test_export_killed_leaves_a_whole_export_and_redoes_it(tmp_path):
  # pylint: disable=g-import-not-at-top
  from squad_qa.model import bert_config as bert_config_lib
  from squad_qa.model import span_model
  from squad_qa.serving import module as serving_module
  from squad_qa.serving import saved_model_qa
  # pylint: enable=g-import-not-at-top
  # The --model_dir is written here (what export.py reads is the same as after train.py, which
  # test_train_killed_resumes_to_the_same_final_step runs): only export.py is killed.
  model, _ = span_model.build_span_model(
      bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG))
  model_dir = testutil.write_model_dir(
      tmp_path / "model_out", model,
      dict(max_seq_length=64, doc_stride=32, max_query_length=16, do_lower_case=True,
           **serving_module.DECODING_DEFAULTS))
  export_dir = tmp_path / "export"
  # Without serve_text: a quicker export, the same files and renames.
  argv = [
      "export.py", f"--model_dir={model_dir}", f"--export_dir={export_dir}", "--serve_text=false"
  ]
  question, context = "Who wrote it?", "It was written by Ada Lovelace in 1843."

  def answers():
    return saved_model_qa.SavedModelQA(str(export_dir)).answers_with_serve_features([question],
                                                                                    [context])

  testutil.run_cli(*argv)
  first = answers()
  for seed in SEEDS:
    kill_when(argv, "serving ", seed, tmp_path / "export.log", max_delay=6)
    # The earlier export, whole; set aside for an instant while the new one is renamed in (the
    # next export.py puts it back).
    whole = export_dir if export_dir.exists() else tmp_path / "export.old-export"
    assert (whole / "saved_model.pb").exists(), seed
    assert checkpoints.damage(str(whole / "variables" / "variables")) is None, seed
  testutil.run_cli(*argv)
  assert sorted(os.listdir(tmp_path)) == ["export", "export.log", "model_out"]
  assert answers() == first
