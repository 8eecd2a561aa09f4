"""benchmarks/featurize_squad.py: our job's child times itself; bad inputs are one line."""

import argparse
import json

import pytest

from benchmarks import featurize_squad
from squad_qa import errors
from tests import testutil


def job_args(tmp_path, **changes):
  values = dict(
      dev_file=testutil.write_squad_slice(testutil.DEV_FILE, tmp_path / "dev.json", 3),
      train_file=testutil.write_squad_slice(testutil.TRAIN_FILE, tmp_path / "train.json", 4),
      vocab_file=testutil.vocab_file(), max_seq_length=64, doc_stride=32, max_query_length=16,
      num_workers=1, output_dir=str(tmp_path / "records"), ours_child="dev+train")
  return argparse.Namespace(**dict(values, **changes))


def test_our_child_makes_the_records_and_prints_its_job_s_seconds(tmp_path, capsys):
  featurize_squad.ours_child(job_args(tmp_path))
  result = featurize_squad.json_result(capsys.readouterr().out)
  assert set(result) == {"seconds", "cpu_seconds"}
  assert 0 < result["seconds"] < 60 and 0 < result["cpu_seconds"] < 60
  with open(tmp_path / "records" / "meta.json", encoding="utf-8") as f:
    splits = json.load(f)["splits"]
  assert {split: info["num_examples"] for split, info in splits.items()} == {"train": 4, "eval": 3}


def test_each_job_reads_its_own_files(tmp_path):
  args = job_args(tmp_path)
  dev = featurize_squad.records_config("dev", args, "out")
  assert (dev.predict_file, dev.train_file) == (args.dev_file, None)
  both = featurize_squad.records_config("dev+train", args, "out")
  assert (both.predict_file, both.train_file, both.max_seq_length) == (args.dev_file,
                                                                       args.train_file, 64)


def test_a_missing_input_or_refused_length_is_one_line_before_any_job(tmp_path):
  with pytest.raises(errors.MissingFileError, match="^--dev_file=/nope.json: no such file$"):
    featurize_squad.check_inputs(job_args(tmp_path, dev_file="/nope.json"))
  with pytest.raises(errors.UsageError, match="max_seq_length > max_query_length \\+ 3"):
    featurize_squad.check_inputs(job_args(tmp_path, max_seq_length=16))
  with pytest.raises(errors.UsageError, match="^no --train_file given"):
    featurize_squad.check_inputs(job_args(tmp_path, train_file=None))
