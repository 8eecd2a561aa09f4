"""A command line means what the user typed: leftover arguments stop every command with one line.

absl reads `--do_train False` as `--do_train` plus a positional "False"; before
flags/command_line.py an entry point would drop the positional and run with the flag true.
"""

import ast
import dataclasses
import importlib
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from absl import flags

from squad_qa import errors
from squad_qa.flags import command_line
from squad_qa.flags import settings
from tests import testutil


@pytest.fixture
def flag_values():
  """A private FlagValues with the kinds of flag the entry points define."""
  values = flags.FlagValues()
  flags.DEFINE_bool("do_train", True, "", flag_values=values)
  flags.DEFINE_bool("version_2_with_negative", False, "", flag_values=values)
  flags.DEFINE_integer("max_steps", None, "", flag_values=values)
  flags.DEFINE_string("model_dir", "model_out", "", flag_values=values)
  return values


def refusal(argv, flag_values):
  """The one line `parse_flags` exits with (SystemExit's message), or None when it accepts."""
  try:
    command_line.parse_flags(argv, flag_values)
  except SystemExit as e:
    return str(e.code)
  return None


@pytest.mark.parametrize(
    "argv, line",
    [
        (["--do_train", "False"
         ], "unexpected argument 'False' after --do_train: a boolean flag takes no separate value "
         "(this would have run with --do_train alone); write --do_train=false or --nodo_train"),
        (["--version_2_with_negative", "false"
         ], "unexpected argument 'false' after --version_2_with_negative: a boolean flag takes no "
         "separate value (this would have run with --version_2_with_negative alone); write "
         "--version_2_with_negative=false or --noversion_2_with_negative"),
        (["--max_steps=3", "-do_train", "0"
         ], "unexpected argument '0' after -do_train: a boolean flag takes no separate value (this "
         "would have run with -do_train alone); write --do_train=false or --nodo_train"),
        (["--nodo_train", "True"
         ], "unexpected argument 'True' after --nodo_train: a boolean flag takes no separate value "
         "(this would have run with --nodo_train alone); write --do_train=true or --do_train"),
        (["--do_train", "yes"
         ], "unexpected argument 'yes' after --do_train: a boolean flag takes no separate value; "
         "write --do_train, --nodo_train or --do_train=true|false"),
        # A non-boolean flag takes the next argument as its value, so "False" is the stray one here.
        (["--max_steps", "5", "False"
         ], "unexpected argument 'False': this command takes no positional arguments; flags are "
         "written --name=value"),
        (["records"
         ], "unexpected argument 'records': this command takes no positional arguments; flags are "
         "written --name=value"),
        (["--do_train=false", "--", "--max_steps=2"],
         "unexpected argument '--max_steps=2': this command takes no positional arguments; flags "
         "are written --name=value"),
    ])
def test_leftover_argument_is_refused_with_the_right_spelling(argv, line, flag_values):
  assert refusal(["train.py", *argv], flag_values) == f"train.py: {line}"


@pytest.mark.parametrize(
    "argv, do_train, max_steps, model_dir",
    [
        (["--do_train=false"], False, None, "model_out"),
        (["--nodo_train"], False, None, "model_out"),
        (["--do_train"], True, None, "model_out"),
        (["--max_steps", "5", "--model_dir", "out"], True, 5, "out"),
        (["--model_dir", "--weird"
         ], True, None, "--weird"),  # absl: a string flag takes the next word
    ])
def test_flags_that_mean_what_they_say_are_accepted(argv, do_train, max_steps, model_dir,
                                                    flag_values):
  assert refusal(["train.py", *argv], flag_values) is None
  assert (flag_values.do_train, flag_values.max_steps,
          flag_values.model_dir) == (do_train, max_steps, model_dir)


def test_absl_errors_are_one_line(flag_values):
  assert refusal(
      ["train.py", "--max_step=5"],
      flag_values) == ("train.py: Unknown command line flag 'max_step'. Did you mean: max_steps ? "
                       "(--helpfull lists the flags)")
  assert refusal(["train.py", "--max_steps=five"], flag_values) == (
      "train.py: flag --max_steps=five: invalid literal for int() with base 10: 'five' "
      "(--helpfull lists the flags)")
  assert refusal(["train.py", "--do_train=maybe"], flag_values) == (
      "train.py: --do_train=maybe: expected true or false (or --do_train, --nodo_train) "
      "(--helpfull lists the flags)")


def test_config_from_flags_reads_the_fields_and_lists_the_typed_flags(flag_values):
  """Each field is its flag's value; `typed_flags` names the flags typed, even at their default."""

  @dataclasses.dataclass(frozen=True)
  class Plain:
    do_train: bool
    model_dir: str
    not_a_flag: int = 7

  @dataclasses.dataclass(frozen=True)
  class Typed:
    model_dir: str
    max_steps: int = None
    do_train: bool = False
    typed_flags: tuple = None

  assert refusal(["export.py", "--model_dir=model_out", "--nodo_train"], flag_values) is None
  assert command_line.config_from_flags(Plain, flag_values) == Plain(False, "model_out", 7)
  assert command_line.config_from_flags(Typed, flag_values) == Typed("model_out", None, False,
                                                                     ("do_train", "model_dir"))


def main_blocks():
  """{path: source of its `if __name__ == "__main__":` block} for every .py file of the project."""
  blocks = {}
  for folder, dirs, files in os.walk(testutil.REPO):
    dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("tests", "build")]
    for name in files:
      if not name.endswith(".py"):
        continue
      path = os.path.join(folder, name)
      with open(path, encoding="utf-8") as f:
        source = f.read()
      for node in ast.parse(source).body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
          blocks[os.path.relpath(path, testutil.REPO)] = ast.unparse(node)
  return blocks


def test_every_absl_entry_point_starts_through_command_line_run():
  """A file that parses absl flags (its own or the project's) starts through
  `command_line.run(main)`, directly or through its `cli()` (the console script's target); the
  others (argparse, through `command_line.run_argparse`; TensorFlow's saved_model_cli) never call
  absl's app.run."""
  blocks = main_blocks()
  absl_modules = ("absl.flags", "squad_qa.flags.command_line")

  def parses_absl_flags(path):  # a module-level import: peer.py defines absl flags for others
    tree = ast.parse(testutil.REPO.joinpath(path).read_text())
    return any(
        isinstance(node, ast.ImportFrom) and any(f"{node.module}.{a.name}" in absl_modules
                                                 for a in node.names) for node in tree.body)

  absl_entry_points = [
      path for path in blocks
      if parses_absl_flags(path) and "command_line.run_argparse(" not in blocks[path]
  ]
  assert absl_entry_points
  for path in absl_entry_points:
    block = blocks[path]
    if "cli()" in block:
      source = testutil.REPO.joinpath(path).read_text()
      cli = next(node for node in ast.parse(source).body
                 if isinstance(node, ast.FunctionDef) and node.name == "cli")
      block = ast.unparse(cli)
    assert "command_line.run(main" in block, path
  for path, block in blocks.items():
    assert "app.run" not in block, path


# argparse entry points run by another interpreter (the peer's or the reference's virtualenv,
# without this package).
NOT_THROUGH_RUN_ARGPARSE = ("benchmarks/peer.py", "tools/make_hf_reference.py")


def test_every_argparse_benchmark_and_tool_starts_through_run_argparse():
  """The clone's argparse benchmarks and tools end a UserError as the commands do (one line)."""
  blocks = main_blocks()
  argparse_entry_points = [
      path for path, block in blocks.items() if path.startswith(("benchmarks/", "tools/")) and
      "command_line.run(main" not in block and path not in NOT_THROUGH_RUN_ARGPARSE
  ]
  assert "benchmarks/step_profile.py" in argparse_entry_points
  for path in argparse_entry_points:
    assert "command_line.run_argparse(main)" in blocks[path], path


def test_run_argparse_ends_a_user_error_in_one_line_and_passes_the_rest(monkeypatch):
  monkeypatch.setattr(sys, "argv", ["step_profile.py"])

  def missing():
    raise errors.MissingFileError("/nope/meta.json: not found")

  with pytest.raises(SystemExit) as stopped:
    command_line.run_argparse(missing)
  assert stopped.value.code == "step_profile.py: /nope/meta.json: not found"  # status 1
  assert command_line.run_argparse(lambda: 3) == 3

  def failing():
    raise RuntimeError("a bug")

  with pytest.raises(RuntimeError, match="^a bug$"):  # other errors keep their traceback
    command_line.run_argparse(failing)


@pytest.mark.slow
def test_commands_refuse_a_stray_false(tmp_path):
  """The issue's inputs, as typed, through the real commands (run side by side)."""
  commands = {
      "train": ([
          "train.py", f"--records_dir={tmp_path}/records", f"--model_dir={tmp_path}/model",
          "--do_train", "False"
      ], "train.py: unexpected argument 'False' after --do_train: a boolean flag takes no "
                "separate value (this would have run with --do_train alone); write "
                "--do_train=false or --nodo_train"),
      "make_records": ([
          "preprocess/make_records.py", f"--output_dir={tmp_path}/records",
          "--version_2_with_negative", "False", "--do_lower_case", "False"
      ], "make_records.py: unexpected argument 'False' after "
                       "--version_2_with_negative: a boolean flag takes no separate value (this "
                       "would have run with --version_2_with_negative alone); write "
                       "--version_2_with_negative=false or --noversion_2_with_negative"),
      "memory": (["-m", "model.memory", "--max_seq_length=128", "384"],
                 "model.memory: unexpected argument '384': this command takes no positional "
                 "arguments; flags are written --name=value"),
  }
  procs = {
      name: subprocess.Popen([sys.executable, *argv], cwd=testutil.REPO, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={
                                 **os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"
                             }) for name, (argv, _) in commands.items()
  }
  for name, proc in procs.items():
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, (name, stderr[-2000:])
    assert stdout == ""
    assert stderr.strip().splitlines()[-1] == commands[name][1]
    assert "Traceback" not in stderr
  assert os.listdir(tmp_path) == []  # nothing written: no records, no model_dir


# Run as the console scripts do (the command module's cli()); prints whether TensorFlow had loaded
# when the command stopped.
_FLAG_ERROR_CHECK = """
import importlib, sys
command, sys.argv = sys.argv[1], sys.argv[2:]
try:
  importlib.import_module(command).cli()
finally:
  print("tensorflow" in sys.modules)
"""


@pytest.mark.parametrize(
    "command, argv, line",
    [
        ("squad_qa.train", ["train.py", "--max_steps=0"],
         "train.py: flag --max_steps=0: 0 is not a positive integer (--helpfull lists the flags)"),
        ("squad_qa.export", ["export.py", "--serve_text", "no"],
         "export.py: unexpected argument 'no' after --serve_text: a boolean flag takes no separate "
         "value; write --serve_text, --noserve_text or --serve_text=true|false"),
        ("squad_qa.ask", ["ask.py", "--export_dirr=x"],
         "ask.py: Unknown command line flag 'export_dirr'. Did you mean: export_dir ? "
         "(--helpfull lists the flags)"),
        ("squad_qa.preprocess.make_records", ["make_records.py", "--max_seq_length=abc"],
         "make_records.py: flag --max_seq_length=abc: invalid literal for int() with base 10: "
         "'abc' (--helpfull lists the flags)"),
        ("squad_qa.model.convert_checkpoint", ["convert_checkpoint.py", "--output=bert_tf2"],
         "convert_checkpoint.py: --init_checkpoint and --output are required"),
        # Another command's flag names that command (the settings classes load without TensorFlow).
        ("squad_qa.train", ["train.py", "--doc_stride=64"],
         "train.py: --doc_stride is a flag of squad-qa-records and squad-qa-export, not of this "
         "command (--helpfull lists its flags)"),
        # Another tool's flag typed from habit: this command's equivalent.
        ("squad_qa.train", ["train.py", "--output_dir=out"],
         "train.py: --output_dir is a flag of google-research/bert's run_squad.py and Hugging "
         "Face's run_qa.py; here it is --model_dir"),
        ("squad_qa.export", ["export.py", "--output_dir=out"],
         "export.py: --output_dir is a flag of google-research/bert's run_squad.py and Hugging "
         "Face's run_qa.py; here it is --export_dir"),
        ("squad_qa.train", ["train.py", "--bf16"
                           ], "train.py: --bf16 is a flag of Hugging Face's run_qa.py; here it is "
         "--mixed_precision_dtype=bfloat16"),
        ("squad_qa.train", ["train.py", "--nodo_eval"],
         "train.py: --nodo_eval is a flag of Hugging Face's run_qa.py; here it is --nodo_predict"),
        ("squad_qa.preprocess.make_records", ["make_records.py", "--nodo_train"],
         "make_records.py: --nodo_train is a flag of squad-qa-train, not of this command "
         "(--helpfull lists its flags)"),
    ])
def test_a_flag_error_answers_before_tensorflow_loads(command, argv, line):
  """A mistyped flag costs the user no TensorFlow start (~5-10 s): the drivers import the library
  only in main(), after the flags have parsed."""
  proc = subprocess.run([sys.executable, "-c", _FLAG_ERROR_CHECK, command, *argv],
                        cwd=testutil.REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1] == line
  assert proc.stdout.split() == ["False"]  # tensorflow not in sys.modules


def command_flag_values(config_path):
  """A private FlagValues holding the flags of the settings class at `config_path`
  ("tasks.train_config.TrainConfig") and absl's --verbosity."""
  module, _, name = config_path.rpartition(".")
  values = flags.FlagValues()
  settings.define_flags(getattr(importlib.import_module(f"squad_qa.{module}"), name),
                        flag_values=values)
  flags.DEFINE_integer("verbosity", 0, "", flag_values=values)
  return values


TRAIN, RECORDS = "tasks.train_config.TrainConfig", "preprocess.records_config.RecordsConfig"
RUN_SQUAD, RUN_QA = "google-research/bert's run_squad.py", "Hugging Face's run_qa.py"


@pytest.mark.parametrize("config, argv, line", [
    (TRAIN, ["--validation_file=dev.json"
            ], f"--validation_file is a flag of {RUN_QA}; here it is --predict_file"),
    (TRAIN, ["--save_steps", "0"
            ], f"--save_steps is a flag of {RUN_QA}; here it is --save_checkpoints_steps"),
    (TRAIN, ["--eval_steps=50"
            ], f"--eval_steps is a flag of {RUN_QA}; here it is --eval_every_steps"),
    (TRAIN, ["--pad_to_max_length"
            ], f"--pad_to_max_length is a flag of {RUN_QA}; here it is --nolength_buckets"),
    (TRAIN, ["--pad_to_max_length=false"], f"--pad_to_max_length=false is a flag of {RUN_QA}; "
     "drop it here: batches pad to their longest window by default"),
    (RECORDS, ["--pad_to_max_length"], f"--pad_to_max_length is a flag of {RUN_QA}; the "
     "equivalent is squad-qa-train --nolength_buckets, not a flag of this command"),
    (TRAIN, ["--use_tpu=False"
            ], f"--use_tpu=False is a flag of {RUN_SQUAD}; drop it here: no TPU is the default"),
    (TRAIN, ["--use_tpu", "False"
            ], f"--use_tpu False is a flag of {RUN_SQUAD}; drop it here: no TPU is the default"),
    (TRAIN, ["--use_tpu=true"
            ], f"--use_tpu is a flag of {RUN_SQUAD}; here it is --distribution_strategy=tpu"),
    (TRAIN, ["--tpu_name=v3-8"], f"--tpu_name is a flag of {RUN_SQUAD}; here it is --tpu"),
    (RECORDS, ["--iterations_per_loop=1000"], f"--iterations_per_loop is a flag of {RUN_SQUAD}; "
     "the equivalent is squad-qa-train --steps_per_loop, not a flag of this command"),
    (TRAIN, ["--verbose_logging"
            ], f"--verbose_logging is a flag of {RUN_SQUAD}; here it is --verbosity=1"),
    (RECORDS, ["--preprocessing_num_workers=4"
              ], f"--preprocessing_num_workers is a flag of {RUN_QA}; here it is --num_workers"),
    (TRAIN, ["--max_eval_samples=100"
            ], f"--max_eval_samples is a flag of {RUN_QA}; here it is --max_eval_examples"),
    (TRAIN, ["--warmup_steps=100"], f"--warmup_steps is a flag of {RUN_QA}; here it is "
     "--warmup_proportion (a share of the training steps)"),
    (TRAIN, ["--overwrite_output_dir"], f"--overwrite_output_dir is a flag of {RUN_QA}; there is "
     "none here: a --model_dir holding checkpoints is resumed; give a new --model_dir to start over"
    ),
    (TRAIN, ["--max_train_samples=100"], f"--max_train_samples is a flag of {RUN_QA}; there is "
     "none here: train fewer --max_steps, or make records of fewer questions"),
    (TRAIN, ["--dataset_name", "squad"], f"--dataset_name is a flag of {RUN_QA}; there is none "
     "here: nothing is downloaded: make the records from SQuAD JSON files (--train_file, "
     "--predict_file)"),
    (TRAIN, ["--max_grad_norm=1.0"], f"--max_grad_norm is a flag of {RUN_QA}; there is none "
     "here: gradients are clipped to google-research/bert's global norm, fixed"),
    (TRAIN, ["--group_by_length"],
     f"--group_by_length is a flag of {RUN_QA}; here it is --length_buckets (the default)"),
    (TRAIN, ["--no_cuda"], f"--no_cuda is a flag of {RUN_QA}; there is none here: the CPU is the "
     "default (--gpu trains on a GPU)"),
    (TRAIN, ["--use_cpu=false"], f"--use_cpu=false is a flag of {RUN_QA}; drop it here: it is the "
     "default"),
    (RECORDS, ["--logging_steps", "50"], f"--logging_steps is a flag of {RUN_QA}; the equivalent "
     "is squad-qa-train --log_steps, not a flag of this command"),
    (TRAIN, ["--keep_going"
            ], "Unknown command line flag 'keep_going' (--helpfull lists the flags)"),
])
def test_another_tool_s_flag_names_its_equivalent(config, argv, line):
  """run_squad.py's and run_qa.py's flags typed from habit: this command's equivalent (a false
  boolean: drop it), another command's, or why there is none; never absl's nearest spelling
  (--validation_file is not --train_file, --save_steps not --max_steps)."""
  assert refusal(["train.py"] + argv, command_flag_values(config)) == f"train.py: {line}"


def test_every_habit_names_flags_that_exist_and_none_of_ours():
  """Each equivalent in the habit table is a flag of some command of the package, and the only
  habit that is one is --output_dir (squad-qa-records'; train and export answer it as the other
  tools' output folder): any other would hide which of our commands takes it."""
  ours_too = [name for name in command_line.HABIT_FLAGS if command_line.commands_taking(name)]
  assert ours_too == ["output_dir"]
  for name, habit in command_line.HABIT_FLAGS.items():
    assert habit.equivalents or habit.no_equivalent, name
    for ours in habit.equivalents:
      flag = command_line._equivalent_name(ours)
      assert flag == "verbosity" or command_line.commands_taking(flag), (name, ours)  # absl's


def test_every_unknown_flag_is_answered_at_once():
  """A command copied from run_squad.py or run_qa.py has several flags this one lacks: each gets
  its line, in the order typed, not one per attempt (absl stops at the first); "--name value"
  takes its value along, and the flags this command has are not listed."""
  argv = [
      "--output_dir=out", "--max_steps=10", "--per_device_train_batch_size", "12", "--use_tpu",
      "False", "--keep_going", "--max_seq_length=384", "--model_dir", "m", "--do_train"
  ]
  assert refusal(["train.py"] + argv, command_flag_values(TRAIN)).splitlines() == [
      f"train.py: --output_dir is a flag of {RUN_SQUAD} and {RUN_QA}; here it is --model_dir",
      f"train.py: --per_device_train_batch_size is a flag of {RUN_QA}; here it is "
      "--train_batch_size",
      f"train.py: --use_tpu False is a flag of {RUN_SQUAD}; drop it here: no TPU is the default",
      "train.py: Unknown command line flag 'keep_going' (--helpfull lists the flags)",
      "train.py: --max_seq_length is a flag of squad-qa-records, squad-qa-export and "
      "squad-qa-memory, not of this command (--helpfull lists its flags)",
  ]


def test_an_unknown_flag_in_a_flagfile_is_answered_alone(tmp_path):
  """A flag absl reads from a --flagfile is not on the command line: its line comes alone."""
  flagfile = tmp_path / "flags.txt"
  flagfile.write_text("--max_steps=10\n--save_steps=50\n")
  line = refusal(["train.py", f"--flagfile={flagfile}", "--model_dir=m"],
                 command_flag_values(TRAIN))
  assert line == f"train.py: --save_steps is a flag of {RUN_QA}; here it is " \
      "--save_checkpoints_steps"


def test_help_lists_the_command_s_flags_and_ask_takes_no_export_flags():
  """`python ask.py --help` shows ask.py's own flags; export.py's are not ask.py's (given there they
  would change nothing) and are refused as unknown."""
  proc = subprocess.run([sys.executable, "ask.py", "--help"], cwd=testutil.REPO,
                        capture_output=True, text=True, timeout=300)
  listed = set(re.findall(r"^  --(?:\[no\])?(\w+):", proc.stdout, re.MULTILINE))
  assert listed == {
      "context", "context_file", "export_dir", "format", "max_answer_length", "n_best_size",
      "null_score_diff_threshold", "question", "use_serve_features"
  }, proc.stdout
  proc = subprocess.run(
      [sys.executable, "ask.py", "--serving_precision=bfloat16", "--question=q", "--context=c"],
      cwd=testutil.REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1
  assert proc.stderr.strip() == (
      "ask.py: --serving_precision is a flag of python export.py, not of "
      "this command (--helpfull lists its flags)")


# (console script, file command, a line of one of its flags' help)
HELP_CASES = [
    ("squad-qa-train", ["train.py"], "  --learning_rate: Peak learning rate of AdamW."),
    ("squad-qa-export", ["export.py"], "  --export_dir: Where the SavedModel is written."),
    ("squad-qa-ask", ["ask.py"], "  --context: The passage holding the answer."),
    ("squad-qa-records", ["preprocess/make_records.py"],
     "  --doc_stride: Step, in tokens, between the starts of consecutive context"),
    ("squad-qa-memory", ["-m", "model.memory"],
     "  --device_memory_gb: Memory of the device training runs on, in GiB (2^30"),
    ("squad-qa-convert-checkpoint", ["-m", "model.convert_checkpoint"],
     "  --output: Folder for the converted TF2 checkpoint, with the config and vocab"),
]


@pytest.mark.parametrize("script, command, line", HELP_CASES)
def test_help_and_h_list_the_command_s_flags_however_it_was_started(script, command, line):
  """A console script's --help and -h show the command's docstring and its own flags, as
  `python <command> --help` does (absl keys --help to argv[0]'s module, which a console script's
  generated wrapper is not)."""
  started = [os.path.join(os.path.dirname(sys.executable), script)]
  for argv in (started + ["--help"], started + ["-h"], [sys.executable, *command, "-h"]):
    proc = subprocess.run(argv, cwd=testutil.REPO, capture_output=True, text=True, timeout=300)
    assert line in proc.stdout.splitlines(), (argv, proc.stdout, proc.stderr)
    assert not proc.stdout.startswith("\nUSAGE:"), argv  # absl's text for a module without one
    assert proc.returncode == 0, argv  # help asked for is not a failure
    # The flags are headed by the command's name as typed, not a path to its file or wrapper.
    name = (script if argv[0] != sys.executable else
            command[-1] if command[0] == "-m" else os.path.basename(command[-1]))
    assert f"{name}:" in proc.stdout.splitlines(), (argv, proc.stdout)
    assert os.path.dirname(sys.executable) not in proc.stdout
    assert str(testutil.REPO) not in proc.stdout
    # Nothing names the package's source files or modules (the clone's commands aside).
    text = proc.stdout.replace("preprocess/make_records.py", "")
    assert not re.search(
        r"\b(tasks|model|serving|preprocess|postprocess|base|flags)/[\w/]+\.py\b|"
        r"\b(tasks|serving|preprocess|postprocess|base|flags)\.[a-z_]+|"
        r"\bmodel\.(?!memory\b|convert_checkpoint\b|safetensors\b)[a-z_]+", text), proc.stdout
    if argv[0] != sys.executable:  # an install's help names the console scripts, no clone file
      assert not re.search(
          r"python (preprocess/|-m model\.|train\.py|export\.py|ask\.py)|"
          r"(?<![\w/])(make_records|train|export|ask)\.py\b", proc.stdout), proc.stdout


def test_config_from_flags_reads_each_field_from_its_flag():

  @dataclasses.dataclass(frozen=True)
  class Config:
    max_steps: int = None
    model_dir: str = "elsewhere"
    not_a_flag: int = 7

  values = flags.FlagValues()
  flags.DEFINE_integer("max_steps", None, "", flag_values=values)
  flags.DEFINE_string("model_dir", "model_out", "", flag_values=values)
  values(["prog", "--max_steps=5"])
  assert command_line.config_from_flags(Config, values) == Config(5, "model_out", 7)


def test_the_ctrl_c_line_starts_on_a_line_of_its_own_after_a_progress_bar(monkeypatch, capsys):
  """A terminal's bar leaves its line open; the interrupt line goes below it, not after it."""
  from squad_qa.base import progress  # pylint: disable=g-import-not-at-top

  def main(argv):
    del argv
    bar = progress.Progress("training", 10, "steps", progress.Display(interactive=True))
    bar.update(3)
    raise KeyboardInterrupt

  monkeypatch.setattr(sys, "argv", ["train.py"])
  with pytest.raises(SystemExit) as stopped:
    command_line.run(main, after_interrupt="ckpt-2 is kept")
  assert stopped.value.code == command_line.INTERRUPTED_EXIT_STATUS
  out, err = capsys.readouterr()
  assert " 3/10 [" in out and out.endswith("\n")
  assert err.splitlines()[-1] == "train.py: interrupted (Ctrl-C); ckpt-2 is kept"


def test_sigterm_cleans_up_as_ctrl_c_does_then_says_so_in_one_line(monkeypatch, capsys):
  """`kill` raises in the command (its cleanup runs) and ends it with status 143 and one line;
  the handler before the command is back afterwards."""

  cleaned = []

  def main(argv):
    del argv
    try:
      os.kill(os.getpid(), signal.SIGTERM)
      time.sleep(5)  # the handler raises before this ends
    finally:
      cleaned.append(True)

  monkeypatch.setattr(sys, "argv", ["export.py"])
  before = signal.getsignal(signal.SIGTERM)
  with pytest.raises(SystemExit) as stopped:
    command_line.run(main)
  assert stopped.value.code == command_line.TERMINATED_EXIT_STATUS == 143
  assert cleaned == [True]
  assert capsys.readouterr().err.splitlines()[-1] == (
      "export.py: stopped by SIGTERM; nothing half-written is left; the same command starts again")
  assert signal.getsignal(signal.SIGTERM) is before
  monkeypatch.setattr(sys, "argv", ["ask.py"])  # a command that writes nothing says nothing more
  with pytest.raises(SystemExit) as stopped:
    command_line.run(main, after_interrupt=None)
  assert stopped.value.code == 143
  assert capsys.readouterr().err.splitlines()[-1] == "ask.py: stopped by SIGTERM"

  # Wrapped by the code it interrupted (TensorFlow's tracing turns what it raises into a
  # StagingError), it is still the SIGTERM's line and status, not a traceback.

  def wrapping_main(argv):
    try:
      main(argv)
    except command_line.Terminated as e:
      raise RuntimeError("in user code: bad argument to internal function") from e

  monkeypatch.setattr(sys, "argv", ["ask.py"])
  with pytest.raises(SystemExit) as stopped:
    command_line.run(wrapping_main, after_interrupt=None)
  assert stopped.value.code == 143 and cleaned == [True, True, True]
  assert capsys.readouterr().err.splitlines()[-1] == "ask.py: stopped by SIGTERM"

  def failing_main(argv):
    raise RuntimeError("before any SIGTERM")

  with pytest.raises(RuntimeError, match="^before any SIGTERM$"):  # other errors stay errors
    command_line.run(failing_main, after_interrupt=None)
  # train.py's: 42, the preemption status a scheduler reruns, wherever the SIGTERM came.
  monkeypatch.setattr(sys, "argv", ["train.py"])
  with pytest.raises(SystemExit) as stopped:
    command_line.run(main, after_interrupt="ckpt-5 is kept; the same command resumes from it",
                     terminated_exit_status=command_line.PREEMPTED_EXIT_STATUS)
  assert stopped.value.code == 42 and cleaned == [True, True, True, True]
  assert capsys.readouterr().err.splitlines()[-1] == (
      "train.py: stopped by SIGTERM; ckpt-5 is kept; the same command resumes from it")


def test_signals_end_at_once_only_within():
  """Within, SIGTERM and SIGINT have the system's action (the kernel ends the process, with no
  Python handler needed); after, the handlers from before are back."""
  before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
  with command_line.signals_end_at_once():
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL
  assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


@pytest.mark.parametrize(
    "command", [["train.py", "--help"], ["-m", "model.memory", "--gpu", "--device_memory_gb=16"]])
def test_a_reader_that_leaves_stdout_ends_the_command_quietly(command):
  """`squad-qa-train --help | head -1`: the pipe's reader is gone before the command writes; the
  command ends with the status shells give it (141), and no traceback."""
  proc = subprocess.Popen([sys.executable, *command], cwd=testutil.REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  proc.stdout.close()  # as `head` exits
  stderr = proc.stderr.read()
  assert proc.wait(timeout=300) == command_line.BROKEN_PIPE_EXIT_STATUS, stderr
  assert "Traceback" not in stderr and "BrokenPipe" not in stderr
