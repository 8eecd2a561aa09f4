"""tools/saved_model_cli.py: a --dir without a SavedModel (an int8 export too) is one line."""

import json

import pytest

from squad_qa import errors
from tools import saved_model_cli


def test_the_dir_is_read_in_both_spellings():
  assert saved_model_cli.dir_argument(["show", "--dir", "export", "--all"]) == "export"
  assert saved_model_cli.dir_argument(["show", "--all", "--dir=export_bf16"]) == "export_bf16"
  assert saved_model_cli.dir_argument(["scan", "--help"]) is None


def test_an_int8_export_or_a_folder_without_a_saved_model_is_one_line(tmp_path):
  int8 = tmp_path / "export_int8"
  (int8 / "assets.extra").mkdir(parents=True)
  (int8 / "assets.extra" / "qa_config.json").write_text(json.dumps({"serving_precision": "int8"}))
  (int8 / "features_int8.tflite").write_bytes(b"")
  with pytest.raises(
      errors.MissingFileError,
      match=f"^--dir={int8}: an int8 export holds no SavedModel, only the LiteRT "
      f"model features_int8.tflite; saved_model_cli reads the float32 and bfloat16 "
      f"exports$"):
    saved_model_cli.check_saved_model(str(int8))
  with pytest.raises(errors.MissingFileError,
                     match=f"^--dir={tmp_path}: no SavedModel there \\(no saved_model.pb\\)$"):
    saved_model_cli.check_saved_model(str(tmp_path))
