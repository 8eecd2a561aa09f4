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
      f"make_records.py: --output_dir={tmp_path}/afile: {tmp_path}/afile is a file, not a folder; "
      f"pass a folder you can write to (it is made when missing)")


@pytest.mark.slow
def test_records_of_one_split_never_delete_the_other_split_s(tmp_path):
  """--predict_file alone into a folder of train records made with other flags: one line with the
  fix, and the train records stay."""
  from squad_qa.preprocess import make_records_job  # pylint: disable=g-import-not-at-top
  train_file = testutil.write_squad_slice(testutil.TRAIN_FILE, tmp_path / "train.json", 5)
  dev_file = testutil.write_squad_slice(testutil.DEV_FILE, tmp_path / "dev.json", 5)
  out = tmp_path / "rec_x"
  make_records_job.make_records(
      make_records_job.RecordsConfig(train_file=train_file, vocab_file=testutil.vocab_file(),
                                     max_seq_length=64, doc_stride=16, max_query_length=16,
                                     num_shards=1, num_workers=1, output_dir=str(out)))
  meta_bytes = (out / "meta.json").read_bytes()
  returncode, output = run_with_env([
      "preprocess/make_records.py", f"--vocab_file={testutil.vocab_file()}",
      f"--predict_file={dev_file}", f"--output_dir={out}", "--num_shards=1", "--num_workers=1"
  ])
  assert returncode == 1 and "Traceback" not in output
  assert output.strip().splitlines()[-1] == (
      f"make_records.py: --output_dir={out}: holds train records made with max_seq_length=64 "
      f"(this run: 384), doc_stride=16 (this run: 128), max_query_length=16 (this run: 64), which "
      f"this run would delete; pass the same flags to add the new records beside them, pass "
      f"--train_file too to remake all, or pass another --output_dir")
  assert (out / "meta.json").read_bytes() == meta_bytes
  assert sorted(os.listdir(out)) == ["meta.json", "train-00000-of-00001.tfrecord"]


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
      "above 0"),
     ("--max_eval_examples=0", "train.py: flag --max_eval_examples=0: 0 is not a positive integer"),
     ("--predict_batch_size=-2",
      "train.py: flag --predict_batch_size=-2: -2 is not a positive integer")])
def test_train_refuses_a_budget_of_no_steps(flag, line):
  """A budget of no steps or no scoring is one line before any work (not a traceback after
  training)."""
  returncode, output = run_with_env(["train.py", flag])
  assert returncode == 1 and line in output and "Traceback" not in output
