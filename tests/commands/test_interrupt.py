"""Ctrl-C (SIGINT to the command's process group, as a terminal sends it) ends a command with one
line of ours and status 130, never a traceback, and leaves no half-written output."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from squad_qa.flags import command_line
from squad_qa.preprocess import records
from tests import testutil


def interrupt_when(argv, ready, log, timeout=300, terminate=False):
  """Starts `python argv` in its own process group with its output in file `log`, sends the group
  SIGINT once `ready(output so far)` holds (`terminate`: SIGTERM to the command's process alone,
  as `kill <pid>` does), and returns (exit status, everything it printed).

  The child gets SIGINT's default action back, as a terminal's foreground command has it: a test
  runner started in the background by a shell inherits SIGINT ignored, and Python then installs
  no KeyboardInterrupt handler, so the command would not see the Ctrl-C at all."""
  with open(log, "w") as out:
    proc = subprocess.Popen([sys.executable, *argv], cwd=testutil.REPO, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
      if ready(log.read_text()):
        if terminate:
          os.kill(proc.pid, signal.SIGTERM)
        else:
          os.killpg(proc.pid, signal.SIGINT)
        break
      time.sleep(0.2)
    proc.wait(timeout=timeout)
  return proc.returncode, log.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("terminate, status, how", [
    (False, command_line.INTERRUPTED_EXIT_STATUS, "interrupted (Ctrl-C)"),
    (True, command_line.TERMINATED_EXIT_STATUS, "stopped by SIGTERM"),
])
def test_ctrl_c_or_sigterm_stops_make_records_and_its_workers_with_one_line(
    tmp_path, terminate, status, how):
  # Enough questions that the shards take about a second to write, the moment interrupted.
  train = testutil.write_squad_slice(testutil.TRAIN_FILE, tmp_path / "train.json", 12000)
  out = tmp_path / "records"
  returncode, output = interrupt_when([
      "preprocess/make_records.py", f"--train_file={train}",
      f"--vocab_file={testutil.vocab_file()}", "--max_seq_length=128", "--doc_stride=64",
      "--num_workers=2", "--num_shards=4", f"--output_dir={out}"
  ], lambda _: out.exists() and any(".tmp-" in name for name in os.listdir(out)),
                                      tmp_path / "records.log", terminate=terminate)
  assert returncode == status, output[-3000:]
  assert "Traceback" not in output and "worker" not in output, output[-3000:]
  assert output.strip().splitlines()[-1] == (
      f"make_records.py: {how}; nothing half-written is left; the same command starts again")
  assert not (out / records.META_FILE).exists()  # readers refuse the folder; a rerun redoes it
  assert not os.path.exists(out)  # a folder the run made goes with it


def tiny_train_py(tmp_path, dev_questions=0):
  """train.py and its flags for the tiny model on records of 24 real train questions (and the
  first `dev_questions` of dev), model_dir `tmp_path`/model."""
  train = testutil.write_squad_slice(testutil.TRAIN_FILE, tmp_path / "train.json", 24)
  dev = (testutil.write_squad_slice(testutil.DEV_FILE, tmp_path /
                                    "dev.json", dev_questions) if dev_questions else None)
  config = testutil.write_tiny_config(tmp_path / "bert_config.json")
  testutil.run_cli("preprocess/make_records.py", f"--train_file={train}",
                   *([f"--predict_file={dev}"] if dev else []),
                   f"--vocab_file={testutil.vocab_file()}", "--max_seq_length=64",
                   "--doc_stride=32", "--max_query_length=16", "--num_shards=1",
                   f"--output_dir={tmp_path}/records")
  return [
      "train.py", f"--records_dir={tmp_path}/records", f"--model_dir={tmp_path}/model",
      f"--bert_config_file={config}", f"--vocab_file={testutil.vocab_file()}",
      "--train_batch_size=8"
  ]


@pytest.mark.slow
def test_ctrl_c_stops_training_with_one_line_and_the_checkpoints_resume(tmp_path):
  status, output = interrupt_when([
      *tiny_train_py(tmp_path), "--max_steps=100000", "--steps_per_loop=1", "--log_steps=1",
      "--save_checkpoints_steps=2", "--do_predict=false"
  ], lambda text: "training: 3 of 100,000 steps" in text, tmp_path / "train.log")
  assert status == command_line.INTERRUPTED_EXIT_STATUS, output[-3000:]
  assert "Traceback" not in output, output[-3000:]
  last = re.fullmatch(
      rf"train.py: interrupted \(Ctrl-C\); {tmp_path}/model/ckpt-(\d+) is kept; the same "
      r"command resumes from it",
      output.strip().splitlines()[-1])
  assert last and int(last.group(1)) >= 2, output[-3000:]
  assert os.path.exists(tmp_path / "model" / f"ckpt-{last.group(1)}.index")


@pytest.mark.slow
def test_sigterm_in_the_prediction_after_training_exits_as_a_preemption(tmp_path):
  """train.py's SIGTERM status is 42 wherever it comes (here after the last checkpoint, while
  predicting), so a scheduler that reruns preempted jobs reruns it, and the rerun predicts."""
  status, output = interrupt_when(
      [*tiny_train_py(tmp_path, dev_questions=1500), "--max_steps=2", "--predict_batch_size=1"],
      lambda text: "predicting with" in text, tmp_path / "train.log", terminate=True)
  assert status == command_line.PREEMPTED_EXIT_STATUS == 42, output[-3000:]
  assert "Traceback" not in output, output[-3000:]
  assert output.strip().splitlines()[-1] == (
      f"train.py: stopped by SIGTERM; {tmp_path}/model/ckpt-2 is kept; the same command resumes "
      f"from it"), output[-3000:]
  assert not os.path.exists(tmp_path / "model" / "predictions.json")


_AFTER_INTERRUPT = """
import sys
from absl import flags
from squad_qa import train
import tensorflow as tf
empty, saved = sys.argv[1:]
tf.compat.v1.train.update_checkpoint_state(saved, saved + "/ckpt-4")
open(saved + "/ckpt-4.index", "w").close()  # a checkpoint is named only when its index exists
for model_dir in (empty, saved):
  flags.FLAGS(["train.py", "--model_dir=" + model_dir])
  print(train.after_interrupt())
flags.FLAGS(["train.py", "--model_dir=" + saved, "--do_train=false"])
print(train.after_interrupt())
"""


def test_ctrl_c_names_the_checkpoint_it_resumes_from_or_says_there_is_none(tmp_path):
  empty, saved = tmp_path / "empty", tmp_path / "saved"
  empty.mkdir()
  saved.mkdir()
  proc = subprocess.run([sys.executable, "-c", _AFTER_INTERRUPT,
                         str(empty), str(saved)], cwd=testutil.REPO, capture_output=True, text=True,
                        timeout=300)
  assert proc.stdout.splitlines() == [
      f"no checkpoint was saved in --model_dir={empty} yet; the same command starts over",
      f"{saved}/ckpt-4 is kept; the same command resumes from it",
      "the checkpoints are as they were; the same command predicts again"  # predicting alone
  ], proc.stderr[-2000:]
