"""base/commands.py: messages name a command as the user started this process."""

import os
import subprocess
import sys
import types

import pytest

from squad_qa.base import commands
from tests import testutil


@pytest.mark.parametrize(
    "main_file, expected",
    [
        (os.path.join(testutil.REPO, "train.py"), "python export.py"),
        (os.path.join(testutil.REPO, "model", "memory", "__main__.py"), "python export.py"),
        (os.path.join(os.path.dirname(sys.executable), "squad-qa-train"), "squad-qa-export"),
        (None, "squad-qa-export"),  # an interactive session or a notebook: no __main__ file
        # Another clone's files, run against an installed (not editable) package.
        ("{other_clone}/train.py", "python export.py"),
        ("{other_clone}/model/memory/__main__.py", "python export.py"),
        ("{other_clone}/tools/train.py", "squad-qa-export"),  # not a command file of it
        ("{elsewhere}/train.py", "squad-qa-export"),  # a user's own train.py
    ])
def test_command_is_named_as_this_process_was_started(monkeypatch, tmp_path, main_file, expected):
  other_clone, elsewhere = tmp_path / "clone", tmp_path / "elsewhere"
  (other_clone / "base").mkdir(parents=True)
  (other_clone / "base" / "commands.py").write_text("")
  main = types.ModuleType("__main__")
  if main_file:
    main.__file__ = main_file.format(other_clone=other_clone, elsewhere=elsewhere)
  monkeypatch.setitem(sys.modules, "__main__", main)
  assert commands.command("squad-qa-export") == expected


def test_every_console_script_names_a_module_with_cli_and_a_file_command():
  for script, (module, file_command) in commands.COMMANDS.items():
    assert script.startswith("squad-qa-")
    path = testutil.REPO / (module.replace(".", os.sep) + ".py")
    assert "\ndef cli(" in path.read_text(encoding="utf-8"), module
    assert file_command.startswith("python "), script


@pytest.mark.slow
def test_a_message_names_the_command_to_run_as_the_user_would_type_it(tmp_path):
  """The same missing records, from the console script and from the clone's file command."""
  console_script = os.path.join(os.path.dirname(sys.executable), "squad-qa-train")
  for argv, expected in (
      ([console_script], f"squad-qa-train: {tmp_path}/none/meta.json: not found; run "
       f"`squad-qa-records --output_dir={tmp_path}/none` first"),
      ([sys.executable, "train.py"], f"train.py: {tmp_path}/none/meta.json: not found; run "
       f"`python preprocess/make_records.py --output_dir={tmp_path}/none` first"),
  ):
    proc = subprocess.run(argv + [f"--records_dir={tmp_path}/none", f"--model_dir={tmp_path}/m"],
                          cwd=testutil.REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == expected, proc.stderr
