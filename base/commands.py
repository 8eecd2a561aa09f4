"""The commands' names, as a user types them: console scripts after an install, file commands in a
clone. Imports nothing but the standard library, so setup.py reads COMMANDS from this file."""

import os
import re
import sys

# Console script -> (the module whose `cli` it runs, inside the package; the clone's file command).
COMMANDS = {
    "squad-qa-records": ("preprocess.make_records", "python preprocess/make_records.py"),
    "squad-qa-train": ("train", "python train.py"),
    "squad-qa-export": ("export", "python export.py"),
    "squad-qa-ask": ("ask", "python ask.py"),
    "squad-qa-memory": ("model.memory.__main__", "python -m model.memory"),
    "squad-qa-convert-checkpoint":
        ("model.convert_checkpoint", "python -m model.convert_checkpoint"),
}
# Console script -> its settings class ("module.Class" inside the package; the converter's flags are
# the training's files), for naming the command that takes a flag another one was given.
CONFIG_CLASSES = {
    "squad-qa-records": "preprocess.records_config.RecordsConfig",
    "squad-qa-train": "tasks.train_config.TrainConfig",
    "squad-qa-export": "serving.export_config.ExportConfig",
    "squad-qa-ask": "serving.ask_config.AskConfig",
    "squad-qa-memory": "model.memory.plan.PlannerConfig",
}
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def started_from_clone():
  """Whether this process runs a file of the package as `__main__` (`python train.py`, `python -m
  model.memory` in a clone), rather than a console script, a notebook or a test runner. The clone
  need not be the package imported: after `pip install .` (not editable) its files import the
  installed copy."""
  main_file = getattr(sys.modules.get("__main__"), "__file__", None)
  if not main_file:
    return False
  main_file = os.path.realpath(main_file)
  if main_file.startswith(_PACKAGE_ROOT + os.sep):
    return True
  for module, _ in COMMANDS.values():
    path = os.sep + module.replace(".", os.sep) + ".py"
    if main_file.endswith(path) and os.path.isfile(
        os.path.join(main_file[:-len(path)], "base", "commands.py")):
      return True
  return False


def command(script):
  """How a message names the command `script` (a key of COMMANDS, e.g. "squad-qa-export"): its
  file command when this process was started from a clone, else the console script.

  Raises:
    KeyError: `script` is not a console script of this package.
  """
  return COMMANDS[script][1] if started_from_clone() else script


def name_commands_as_started(text):
  """`text` (a docstring, a flag's help) with the clone's command names ("python train.py",
  "preprocess/make_records.py", "export.py", ...) as this process's user types them."""
  if started_from_clone():
    return text
  for script, (_, file_command) in COMMANDS.items():
    text = text.replace(file_command, script)
  for script, (module, _) in COMMANDS.items():
    path = module.replace(".", "/") + ".py"
    if not module.endswith("__main__"):
      text = re.sub(rf"(?<![\w/.-]){re.escape(path)}\b", script, text)
      text = re.sub(rf"(?<![\w/.-]){re.escape(os.path.basename(path))}\b", script, text)
  return text
