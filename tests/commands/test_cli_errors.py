"""Bad invocations end with one clear line and a non-zero exit, never a traceback."""

import os
import subprocess
import sys

import pytest

from tests import testutil


def run_with_env(args, **env):
  proc = subprocess.run([sys.executable, *args], cwd=testutil.REPO, capture_output=True, text=True,
                        timeout=300, env={
                            **os.environ,
                            **env
                        })
  return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.slow
def test_missing_squad_says_where_to_get_it(tmp_path):
  returncode, output = run_with_env([
      "preprocess/make_records.py", f"--vocab_file={testutil.vocab_file()}",
      f"--output_dir={tmp_path}/records"
  ], SQUAD_DIR=str(tmp_path / "nowhere"))
  assert returncode != 0
  assert "Traceback" not in output
  line = next(l for l in output.splitlines() if l.startswith("make_records.py: "))
  assert f"{tmp_path}/nowhere/train-v1.1.json" in line
  assert "https://rajpurkar.github.io/SQuAD-explorer/" in line and "SQUAD_DIR" in line
  assert not os.path.exists(tmp_path / "records" / "meta.json")


@pytest.mark.slow
def test_records_output_dir_in_the_way_is_one_line(tmp_path):
  (tmp_path / "afile").write_text("")
  train_file = tmp_path / "train.json"
  train_file.write_text('{"data": [{"title": "t", "paragraphs": [{"context": "Ada wrote it.", '
                        '"qas": [{"id": "q", "question": "Who wrote it?", "answers": '
                        '[{"text": "Ada", "answer_start": 0}]}]}]}]}')
  returncode, output = run_with_env([
      "preprocess/make_records.py", f"--vocab_file={testutil.vocab_file()}",
      f"--train_file={train_file}", f"--output_dir={tmp_path}/afile"
  ])
  assert returncode == 1 and "Traceback" not in output
  assert output.strip().splitlines()[-1] == (
      f"make_records.py: --output_dir={tmp_path}/afile: cannot make that folder (File exists); "
      f"pass a folder you can write to (it is made when missing)")


@pytest.mark.slow
def test_train_without_records_says_to_preprocess(tmp_path):
  returncode, output = run_with_env([
      "train.py", f"--records_dir={tmp_path}/none", f"--model_dir={tmp_path}/model",
      f"--init_checkpoint={testutil.minilm_dir()}"
  ])
  assert returncode != 0
  assert "Traceback" not in output
  assert f"train.py: {tmp_path}/none/meta.json: not found; run `python preprocess/make_records.py" \
      in output


@pytest.mark.slow
@pytest.mark.parametrize(
    "flag,line",
    [("--max_steps=0", "train.py: flag --max_steps=0: 0 is not a positive integer"),
     ("--max_steps=-5", "train.py: flag --max_steps=-5: -5 is not a positive integer"),
     ("--num_train_epochs=0", "train.py: flag --num_train_epochs=0.0: --num_train_epochs must be "
      "above 0")])
def test_train_refuses_a_budget_of_no_steps(flag, line):
  """A budget of no steps is one line before any work (not a default budget, not 1 step)."""
  returncode, output = run_with_env(["train.py", flag])
  assert returncode == 1 and line in output and "Traceback" not in output
