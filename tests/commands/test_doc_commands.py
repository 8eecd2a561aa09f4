"""The command lines of README.md and docs/*.md run as written: each names a command (its console
script or a clone's file command) and only flags of that command, with values its config accepts;
README's JSON layout reads as SQuAD with the answer where it says."""

import json
import os
import re
import shlex

from absl import flags
import pytest

from squad_qa import errors
from squad_qa.base import commands
from squad_qa.flags import command_line
from squad_qa.flags import settings
from squad_qa.preprocess import squad_reader
from tests import testutil

FENCE = re.compile(r"^\s*(```|~~~)")


def config_classes():
  """{console script: the config class whose fields are its flags}."""
  # pylint: disable=g-import-not-at-top  (the convert command's config imports TensorFlow)
  from squad_qa.model import convert_checkpoint
  from squad_qa.model.memory import plan
  from squad_qa.preprocess import records_config
  from squad_qa.serving import ask_config
  from squad_qa.serving import export_config
  from squad_qa.tasks import train_config
  return {
      "squad-qa-records": records_config.RecordsConfig,
      "squad-qa-train": train_config.TrainConfig,
      "squad-qa-export": export_config.ExportConfig,
      "squad-qa-ask": ask_config.AskConfig,
      "squad-qa-memory": plan.PlannerConfig,
      "squad-qa-convert-checkpoint": convert_checkpoint.ConvertConfig,
  }


def code_lines(text):
  """The lines of fenced and indented code blocks of Markdown `text`, continuations joined."""
  lines, in_fence, pending = [], False, ""
  for line in text.splitlines():
    if FENCE.match(line):
      in_fence = not in_fence
      continue
    if not (in_fence or line.startswith("    ")):
      continue
    line = pending + line.strip().removeprefix("$ ")
    pending = line[:-1] + " " if line.endswith("\\") else ""
    if not pending:
      lines.append(line)
  return lines


def command_lines(text):
  """[(console script, [its arguments])] for each code line of `text` that starts a command."""
  starts = [(script, [script]) for script in commands.COMMANDS]
  starts += [
      (script, file_command.split()) for script, (_, file_command) in commands.COMMANDS.items()
  ]
  found = []
  for line in code_lines(text):
    line = line.split(" # ")[0]
    for script, start in starts:
      words = line.split()
      if words[:len(start)] == start:
        found.append((script, shlex.split(line)[len(start):]))
  return found


def parse(script, arguments, environ):
  """The config of `script` from `arguments` as a shell would pass them; raises what the command
  would stop with before any work (a missing input file aside, which is the user's)."""
  values = flags.FlagValues()
  settings.define_flags(config_classes()[script], values)
  argv = [script]
  for argument in arguments:
    if argument in ("...", "[flags]"):
      continue
    argument = os.path.expandvars(argument.strip("[]")) if "$" in argument else argument.strip("[]")
    argv.append(argument.split("|")[0])  # "--dtype=float32|bfloat16": either
  for name in environ:
    argv = [a.replace(f"${name}", environ[name]) for a in argv]
  values(argv)
  try:
    return command_line.config_from_flags(config_classes()[script], values)
  except errors.MissingFileError:
    return None


def documented_command_lines():
  paths = [testutil.REPO / "README.md", *sorted((testutil.REPO / "docs").glob("*.md"))]
  return [(path.name, script, arguments) for path in paths
          for script, arguments in command_lines(path.read_text(encoding="utf-8"))]


def test_the_docs_show_every_command():
  shown = {script for _, script, _ in documented_command_lines()}
  assert shown == set(commands.COMMANDS)
  readme = {
      script
      for script, _ in command_lines((testutil.REPO / "README.md").read_text(encoding="utf-8"))
  }
  assert readme == set(commands.COMMANDS)  # the quick start shows each console script


def test_every_documented_command_line_is_accepted_by_its_command():
  environ = {"MINILM": testutil.minilm_dir(), "SQUAD_DIR": str(testutil.SQUAD_DIR)}
  refused = []
  for name, script, arguments in documented_command_lines():
    try:
      parse(script, arguments, environ)
    except (flags.Error, errors.UsageError) as e:
      refused.append(f"{name}: {script} {' '.join(arguments)}: {e}")
  assert not refused, "\n".join(refused)


def test_a_mistyped_flag_in_a_doc_is_caught():
  [(script, arguments)] = command_lines("```sh\nsquad-qa-train --train_batch_sise=8\n```\n")
  with pytest.raises(flags.Error):
    parse(script, arguments, {})
  [(script, arguments)] = command_lines("    python train.py --max_steps=-3 \\\n      --seed=1\n")
  with pytest.raises(flags.IllegalFlagValueError, match="-3 is not a positive integer"):
    parse(script, arguments, {})


def test_the_readme_json_layout_reads_as_squad(tmp_path):
  readme = (testutil.REPO / "README.md").read_text(encoding="utf-8")
  [block] = re.findall(r"```json\n(.*?)```", readme, re.DOTALL)
  path = tmp_path / "own.json"
  path.write_text(block, encoding="utf-8")
  [example] = squad_reader.read_squad(str(path), is_training=True).examples
  context = json.loads(block)["data"][0]["paragraphs"][0]["context"]
  assert (example.question_text, example.answer_text,
          example.answer_start) == ("When was the bridge painted?", "1932", 38)
  assert context[38:42] == "1932"
