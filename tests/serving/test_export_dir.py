"""check_export_dir: an export replaces an earlier export, never other files."""

import os
from unittest import mock

import pytest

from squad_qa import errors
from squad_qa.serving import export_folder
from squad_qa.serving import export_model
from squad_qa.serving import features_model


def test_a_new_or_empty_folder_or_an_earlier_export_is_accepted(tmp_path):
  export_model.check_export_dir(str(tmp_path / "new"))
  (tmp_path / "empty").mkdir()
  export_model.check_export_dir(str(tmp_path / "empty"))
  for folder, marker in (("saved", export_model.SAVED_MODEL_FILE),
                         ("int8", features_model.INT8_MODEL_FILE)):
    earlier_export(tmp_path / folder, marker)
    export_model.check_export_dir(str(tmp_path / folder))


def earlier_export(folder, marker=export_model.SAVED_MODEL_FILE):
  """A folder laid out as an export of this tool (empty files)."""
  (folder / "variables").mkdir(parents=True)
  (folder / marker).write_bytes(b"")
  (folder / "assets.extra").mkdir()
  (folder / "assets.extra" / "qa_config.json").write_text("{}")


def test_another_tool_s_saved_model_or_an_export_beside_other_files_is_refused_and_kept(tmp_path):
  """A folder of an earlier export is replaced whole: one that also holds the user's files, or
  a SavedModel of another tool, is refused (they would be deleted)."""
  earlier_export(tmp_path / "project")
  (tmp_path / "project" / "NOTES.txt").write_text("mine")
  (tmp_path / "project" / "data").mkdir()
  with pytest.raises(errors.OutputExistsError) as raised:
    export_model.check_export_dir(str(tmp_path / "project"))
  assert str(raised.value) == (
      f"--export_dir={tmp_path / 'project'} holds an earlier export and other files (NOTES.txt, "
      f"data); export replaces the whole folder, so move them or choose a new or empty folder")
  other = tmp_path / "other_saved_model"
  (other / "variables").mkdir(parents=True)
  (other / "saved_model.pb").write_bytes(b"")
  with pytest.raises(errors.OutputExistsError) as raised:
    export_model.check_export_dir(str(other))
  assert str(raised.value) == (
      f"--export_dir={other} holds a model that is not an export of this tool (no "
      f"assets.extra/qa_config.json); export replaces only its own earlier export, so choose a "
      f"new or empty folder")
  assert sorted(os.listdir(tmp_path / "project")) == [
      "NOTES.txt", "assets.extra", "data", "saved_model.pb", "variables"
  ] and sorted(os.listdir(other)) == ["saved_model.pb", "variables"]


def test_a_file_or_a_folder_of_other_files_is_refused_and_kept(tmp_path):
  (tmp_path / "notes.txt").write_text("mine")
  with pytest.raises(errors.OutputExistsError,
                     match=r"--export_dir=.*notes.txt is a file, not a folder"):
    export_model.check_export_dir(str(tmp_path / "notes.txt"))
  model_dir = tmp_path / "model_out"
  model_dir.mkdir()
  for name in ("checkpoint", "ckpt-1.index", "qa_config.json", "train_config.json"):
    (model_dir / name).write_text("x")
  with pytest.raises(errors.OutputExistsError) as raised:
    export_model.check_export_dir(str(model_dir))
  assert str(raised.value) == (
      f"--export_dir={model_dir} is a folder that holds no export (checkpoint, ckpt-1.index, "
      f"qa_config.json, ...); export replaces only an earlier export, so choose a new or empty "
      f"folder")
  assert len(list(model_dir.iterdir())) == 4


def test_replace_swaps_the_new_export_in_and_says_when_it_replaced_one(tmp_path):
  from squad_qa.serving import export_folder  # pylint: disable=g-import-not-at-top
  export_dir = str(tmp_path / "export")
  lines = []
  for version in ("first", "second"):
    new = export_folder.temp_dir(export_dir)
    os.makedirs(new)
    with open(os.path.join(new, export_model.SAVED_MODEL_FILE), "w") as f:
      f.write(version)
    with mock.patch.object(export_folder.logging, "info",
                           lambda fmt, *args: lines.append(fmt % args)):
      export_folder.replace(export_dir)
  with open(os.path.join(export_dir, export_model.SAVED_MODEL_FILE)) as f:
    assert f.read() == "second"
  assert lines == [f"replaced the earlier export in {export_dir}"]
  assert sorted(os.listdir(tmp_path)) == ["export"]


def test_a_checkpoint_deleted_while_read_names_the_export_command_as_started():
  """Not a clone's file (the test runner is no command file): the console script."""
  assert str(export_folder.deleted_while_read("model_out")) == (
      "--model_dir=model_out: a training run saving into it deleted the checkpoint squad-qa-export "
      "was reading; wait for it to finish, or pass --init_checkpoint=<a checkpoint it keeps>")


def test_an_export_dir_that_is_a_link_replaces_the_folder_it_names_and_keeps_the_link(tmp_path):
  target = tmp_path / "exports" / "v1"
  target.mkdir(parents=True)
  (target / "saved_model.pb").write_text("earlier")
  link = tmp_path / "export"
  link.symlink_to(target)
  export_dir = export_folder.followed(str(link) + "/")
  assert export_dir == str(target) and export_folder.followed(str(target)) == str(target)
  for text in ("new", "newer"):  # twice: nothing left aside from the first
    with export_folder.writing(export_dir):
      os.makedirs(export_folder.temp_dir(export_dir))
      with open(os.path.join(export_folder.temp_dir(export_dir), "saved_model.pb"), "w") as f:
        f.write(text)
      export_folder.replace(export_dir)
  assert link.is_symlink() and (link / "saved_model.pb").read_text() == "newer"
  assert sorted(os.listdir(tmp_path)) == ["export", "exports"]
  assert os.listdir(tmp_path / "exports") == ["v1"]
