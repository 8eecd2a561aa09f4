"""The records job's config and its errors: every problem a user can fix is one-line UserError."""

import dataclasses
import json
import os

import pytest

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.preprocess import make_records_job
from squad_qa.preprocess import shard_writer
from squad_qa.preprocess import squad_reader
from tests import testutil

CONTEXT = "The lighthouse keeper painted the tower white in 1904."
SQUAD = {
    "version": "1.1",
    "data": [{
        "title": "Hand-made",
        "paragraphs": [{
            "context": CONTEXT,
            "qas": [{
                "id": "q",
                "question": "Who painted the tower?",
                "answers": [{
                    "text": "The lighthouse keeper",
                    "answer_start": 0
                }]
            }]
        }]
    }]
}


def config(**kwargs):
  return make_records_job.RecordsConfig(
      **{
          "vocab_file": testutil.vocab_file(),
          "max_seq_length": 64,
          "doc_stride": 16,
          "max_query_length": 16,
          "num_shards": 1,
          "num_workers": 1,
          **kwargs
      })


@pytest.fixture
def train_file(tmp_path):
  path = tmp_path / "train.json"
  path.write_text(json.dumps(SQUAD))
  return str(path)


def test_config_is_frozen_and_printable():
  made = config()
  with pytest.raises(dataclasses.FrozenInstanceError):
    made.num_shards = 2
  assert dataclasses.asdict(made)["max_seq_length"] == 64


@pytest.mark.parametrize("kwargs, error, message", [
    ({
        "vocab_file": None
    }, errors.UsageError,
     "--vocab_file is required (the encoder's vocab.txt, e.g. beside its checkpoint)"),
    ({
        "vocab_file": "/nonexistent/vocab.txt"
    }, errors.MissingFileError, "--vocab_file=/nonexistent/vocab.txt: no such file"),
    ({
        "doc_stride": 0
    }, errors.UsageError,
     "need doc_stride > 0, max_query_length > 0, num_shards > 0 and max_seq_length > "
     "max_query_length + 3 (got doc_stride=0, max_query_length=16, num_shards=1, "
     "max_seq_length=64)"),
    ({
        "max_seq_length": 19
    }, errors.UsageError, "max_seq_length=19)"),
    ({
        "num_shards": -1
    }, errors.UsageError, "num_shards=-1,"),
])
def test_config_refuses_what_cannot_work_with_one_line(kwargs, error, message):
  with pytest.raises(error) as raised:
    config(**kwargs)
  assert message in str(raised.value) and "\n" not in str(raised.value)


def test_missing_input_names_the_flag_and_where_squad_is(tmp_path):
  with pytest.raises(errors.MissingFileError) as raised:
    make_records_job.make_records(
        config(predict_file=str(tmp_path / "nope.json"), output_dir=str(tmp_path / "records")))
  assert str(raised.value).startswith(f"--predict_file: no file at '{tmp_path}/nope.json'.")
  assert squad_reader.SQUAD_URL in str(raised.value)


def test_output_dir_in_the_way_is_one_line_with_the_fix(tmp_path, train_file):
  in_the_way = tmp_path / "afile"
  in_the_way.write_text("")
  for output_dir in (str(in_the_way), str(in_the_way / "sub")):
    with pytest.raises(make_records_job.OutputDirError) as raised:
      make_records_job.make_records(config(train_file=train_file, output_dir=output_dir))
    assert str(raised.value) == (f"--output_dir={output_dir}: {in_the_way} is a file, not a "
                                 f"folder; pass a folder you can write to (it is made when "
                                 f"missing)")
  # Said before the inputs are read: a bad input file is not reached.
  not_json = tmp_path / "not.json"
  not_json.write_text("{")
  with pytest.raises(make_records_job.OutputDirError):
    make_records_job.make_records(config(train_file=str(not_json), output_dir=str(in_the_way)))


def test_an_output_dir_another_run_is_writing_is_refused_and_left_as_it_was(tmp_path, train_file):
  output_dir = tmp_path / "records"
  make_records_job.make_records(config(train_file=train_file, output_dir=str(output_dir)))
  before = {path.name: path.read_bytes() for path in output_dir.iterdir()}
  with artifacts.folder_lock("output_dir", str(output_dir), "python preprocess/make_records.py"):
    with pytest.raises(errors.FolderInUseError) as raised:
      make_records_job.make_records(
          config(train_file=train_file, output_dir=str(output_dir), doc_stride=8))
  assert str(raised.value) == (
      f"--output_dir={output_dir} is in use by python preprocess/make_records.py (pid "
      f"{os.getpid()}); wait for it to finish or pass another --output_dir")
  assert {path.name: path.read_bytes() for path in output_dir.iterdir()} == before


def test_an_interrupted_run_removes_the_folders_it_made(tmp_path, train_file, monkeypatch):
  (tmp_path / "kept").mkdir()
  (tmp_path / "kept" / "other.txt").write_text("not the run's")

  def interrupted(*args):
    assert (tmp_path / "kept" / "new" / "records").is_dir()  # made, and locked
    raise KeyboardInterrupt

  monkeypatch.setattr(make_records_job, "_write_splits", interrupted)
  with pytest.raises(KeyboardInterrupt):
    make_records_job.make_records(
        config(train_file=train_file, output_dir=str(tmp_path / "kept" / "new" / "records")))
  assert os.listdir(tmp_path / "kept") == ["other.txt"]  # "new" and "new/records" are gone


def test_unwritable_output_dir_is_one_line_with_the_fix(tmp_path, train_file, monkeypatch):
  monkeypatch.setattr(make_records_job.os, "access", lambda path, mode: False)
  with pytest.raises(make_records_job.OutputDirError) as raised:
    make_records_job.make_records(config(train_file=train_file, output_dir=str(tmp_path / "out")))
  assert str(raised.value) == (f"--output_dir={tmp_path / 'out'}: not writable (permission "
                               f"denied); pass a folder you can write to")
  assert isinstance(raised.value, errors.UserError) and isinstance(raised.value, OSError)


def test_system_errors_are_one_line_user_errors(tmp_path, train_file, monkeypatch):

  def unreadable(path, **kwargs):
    del kwargs
    raise PermissionError(13, "Permission denied", path)

  monkeypatch.setattr(make_records_job.squad_reader, "read_squad", unreadable)
  with pytest.raises(make_records_job.FileAccessError) as raised:
    make_records_job.make_records(config(train_file=train_file, output_dir=str(tmp_path / "out")))
  assert str(raised.value) == f"[Errno 13] Permission denied: '{train_file}'"
  assert isinstance(raised.value, errors.UserError) and isinstance(raised.value, OSError)


def test_worker_errors_are_user_errors():
  assert issubclass(shard_writer.WorkerError, errors.UserError)


def shard_bytes(output_dir, meta, split):
  return {name: (output_dir / name).read_bytes() for name in meta["splits"][split]["shards"]}


@pytest.mark.parametrize("first, second", [("train", "eval"), ("eval", "train")])
def test_a_run_of_one_split_keeps_the_other_split_s_records(tmp_path, train_file, first, second):
  """A folder of train records and a run with --predict_file alone (or the reverse) with the same
  featurization: both splits stay, the earlier one byte for byte."""
  out = tmp_path / "records"
  flag = {"train": "train_file", "eval": "predict_file"}
  before = make_records_job.make_records(config(**{flag[first]: train_file}, output_dir=str(out)))
  kept = shard_bytes(out, before, first)
  after = make_records_job.make_records(config(**{flag[second]: train_file}, output_dir=str(out)))
  assert list(after["splits"]) == ["train", "eval"]
  assert after["splits"][first] == before["splits"][first]
  assert shard_bytes(out, after, first) == kept
  assert json.loads((out / "meta.json").read_text()) == after
  assert sorted(p.name for p in out.iterdir()) == sorted(
      ["meta.json", "train-00000-of-00001.tfrecord", "eval-00000-of-00001.tfrecord"])


def test_a_run_of_one_split_refuses_to_delete_other_records(tmp_path, train_file):
  """The other split's records, made with other flags, would be deleted by the commit: one line
  naming the differences and the fixes; the folder is left as it was."""
  out = tmp_path / "records"
  before = make_records_job.make_records(config(train_file=train_file, output_dir=str(out)))
  meta_bytes = (out / "meta.json").read_bytes()
  kept = shard_bytes(out, before, "train")
  with pytest.raises(errors.OutputExistsError) as raised:
    make_records_job.make_records(
        config(predict_file=train_file, output_dir=str(out), max_seq_length=128, num_shards=2))
  assert str(raised.value) == (
      f"--output_dir={out}: holds train records made with max_seq_length=64 (this run: 128), "
      f"num_shards=1 (this run: 2), which this run would delete; pass the same flags to add the "
      f"new records beside them, pass --train_file too to remake all, or pass another "
      f"--output_dir")
  assert (out / "meta.json").read_bytes() == meta_bytes
  assert shard_bytes(out, before, "train") == kept
  assert sorted(p.name for p in out.iterdir()) == ["meta.json", "train-00000-of-00001.tfrecord"]
  # Both splits named: the whole folder is remade, as asked.
  both = make_records_job.make_records(
      config(train_file=train_file, predict_file=train_file, output_dir=str(out),
             max_seq_length=128))
  assert both["flags"]["max_seq_length"] == 128 and list(both["splits"]) == ["train", "eval"]


def test_split_results_keep_the_first_skipped_question_of_each_reason_in_split_order():
  """Worker groups finish in any order; the merged result names the earliest question."""
  later, earlier = shard_writer.SplitResult(), shard_writer.SplitResult()
  examples = [squad_reader.SquadExample(f"q{i}", "Q?", 0) for i in range(4)]
  later.skip("question_has_no_tokens", [1, 3], examples, begin=100)
  earlier.skip("question_has_no_tokens", [2], examples, begin=0)
  earlier.skip("answer_has_no_tokens", [], examples, begin=0)
  total = shard_writer.SplitResult()
  total.add(later)
  total.add(earlier)
  assert total.skipped == {"question_has_no_tokens": 3, "answer_has_no_tokens": 0}
  assert total.first_skipped == {"question_has_no_tokens": (2, "q2")}
