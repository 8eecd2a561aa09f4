"""A damaged meta.json or qa_config.json: one line naming the file, where it breaks and the fix."""

import os

import pytest

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.preprocess import records

_TRUNCATED = '{"format_version": 2'


def test_a_damaged_meta_json_says_to_rerun_make_records(tmp_path):
  (tmp_path / "meta.json").write_text(_TRUNCATED)
  with pytest.raises(errors.UsageError) as raised:
    records.read_meta(str(tmp_path))
  assert str(raised.value) == (
      f"{tmp_path}/meta.json: not valid JSON (line 1 column 21: Expecting ',' delimiter); the file "
      f"is damaged: rerun `squad-qa-records --output_dir={tmp_path}`")  # as an install names it


def test_a_damaged_qa_config_says_which_command_writes_it(tmp_path):
  (tmp_path / "qa_config.json").write_text(_TRUNCATED)
  with pytest.raises(
      errors.UsageError, match=r"qa_config.json: not valid JSON \(line 1 column 21"
      r".*squad-qa-train writes it with a checkpoint"):
    artifacts.read_qa_config(str(tmp_path))
  extra = tmp_path / "export" / artifacts.EXPORT_EXTRA_DIR
  os.makedirs(extra)
  (extra / artifacts.QA_CONFIG_FILE).write_text("")
  with pytest.raises(errors.UsageError) as raised:
    artifacts.read_export_config(str(tmp_path / "export"))
  assert str(raised.value) == (
      f"{extra}/qa_config.json: not valid JSON (line 1 column 1: Expecting value); the file is "
      f"damaged: export the model again into {tmp_path}/export")
  assert artifacts.read_qa_config(str(tmp_path / "nothing_here")) == {}
