"""Runs an entry point's `main` after absl has parsed its flags, with nothing left over.

absl reads `--do_train False` as `--do_train` followed by the positional "False"; no command here
takes positionals, so `run(main)` stops on any leftover argument with one line naming the
spelling meant (`--do_train=false`), and absl's parsing errors become one line too.
"""

import contextlib
import dataclasses
import importlib
import os
import re
import signal
import sys
import threading
from typing import Tuple

from absl import app
from absl import flags

from squad_qa import errors
from squad_qa.base import commands
from squad_qa.base import progress
from squad_qa.flags import settings

INTERRUPTED_EXIT_STATUS = 130  # 128 + SIGINT: what shells report for a command stopped by Ctrl-C
TERMINATED_EXIT_STATUS = 128 + signal.SIGTERM  # 143: what shells report for one stopped by `kill`
# TensorFlow's exit status after a preemption checkpoint, which cluster managers restart; train.py
# exits with it on any SIGTERM (training, tracing or the prediction after it), since the same
# command resumes from whatever was done.
PREEMPTED_EXIT_STATUS = 42
BROKEN_PIPE_EXIT_STATUS = 128 + signal.SIGPIPE  # 141: what shells report for `cmd | head`


class Terminated(KeyboardInterrupt):
  """SIGTERM (`kill`, a supervisor's stop), raised in the main thread so that a command cleans up
  as after Ctrl-C. train.py's own handler replaces it while training (it saves a checkpoint)."""


# Set while a command runs once `_raise_terminated` raised: TensorFlow's tracing can turn the
# Terminated it raises into another error (e.g. a StagingError), which is still the SIGTERM's.
_TERMINATED = []


def _raise_terminated(signum, frame):
  del signum, frame
  _TERMINATED.append(True)
  raise Terminated()


_HELP_FLAGS = ("--help", "--helpshort", "--helpfull", "--helpxml", "-?")
_BOOLEAN_WORDS = {"true": True, "t": True, "1": True, "false": False, "f": False, "0": False}


def program_name(argv0=None):
  """How messages name the command: "train.py", or "model.memory" under `python -m model.memory`."""
  argv0 = argv0 or sys.argv[0]
  spec = getattr(sys.modules.get("__main__"), "__spec__", None)
  if spec is not None and spec.origin and os.path.abspath(argv0) == spec.origin:
    # python -m: argv[0] is the module's file; a package runs as "<package>.__main__".
    return spec.name.removesuffix(".__main__")
  return os.path.basename(argv0)


def _flag_token(token, flag_values):
  """(the flag, whether the token holds its value) for a "--[no]name[=value]" token, else
  (None, _)."""
  if not token.startswith("-") or token in ("-", "--"):
    return None, False
  name, has_value = token.lstrip("-").split("=", 1)[0], "=" in token
  if name in flag_values:
    return flag_values[name], has_value
  if name.startswith("no") and name[2:] in flag_values and flag_values[name[2:]].boolean:
    return flag_values[name[2:]], has_value
  return None, has_value


def _read_arguments(argv, flag_values):
  """Yields (token, its flag or None, the argument it takes as its value or None) for `argv[1:]` as
  absl reads them: a known non-boolean "--name value" takes the next argument, an unknown one (as
  run_qa.py spells values) a next argument that is not a flag. Ends with "--" and the argument
  after it (every argument after "--" is positional, as in absl)."""
  i = 1
  while i < len(argv):
    token, following = argv[i], argv[i + 1] if i + 1 < len(argv) else None
    if token == "--":
      yield token, None, following
      return
    flag, has_value = _flag_token(token, flag_values)
    value = None
    if token.startswith("-") and token != "-" and not has_value and following is not None:
      if flag is not None and not flag.boolean:
        value = following
      elif flag is None and not following.startswith("-"):
        value = following
    yield token, flag, value
    i += 1 if value is None else 2


def stray_argument(argv, flag_values=flags.FLAGS):
  """(the first argument of `argv[1:]` that is neither a flag nor its value, the token before it
  or None), or None."""
  previous = None
  for token, _, value in _read_arguments(argv, flag_values):
    if token == "--":
      return (value, token) if value is not None else None
    if not token.startswith("-") or token == "-":
      return token, previous
    previous = token if value is None else value
  return None


def stray_argument_message(argument, previous, flag_values=flags.FLAGS):
  """One line saying why `argument` (str) after `previous` (str or None) is refused and what to
  type instead."""
  flag = _flag_token(previous, flag_values)[0] if previous else None
  if flag is not None and flag.boolean and "=" not in previous:
    name = flag.name
    value = _BOOLEAN_WORDS.get(argument.lower())
    if value is None:
      return (f"unexpected argument {argument!r} after {previous}: a boolean flag takes no "
              f"separate value; write --{name}, --no{name} or --{name}=true|false")
    meant = f"--{name}=true or --{name}" if value else f"--{name}=false or --no{name}"
    return (f"unexpected argument {argument!r} after {previous}: a boolean flag takes no "
            f"separate value (this would have run with {previous} alone); write {meant}")
  return (f"unexpected argument {argument!r}: this command takes no positional arguments; "
          f"flags are written --name=value")


RUN_SQUAD, RUN_QA = "google-research/bert's run_squad.py", "Hugging Face's run_qa.py"
RUN_QA_NO_TRAINER = "Hugging Face's run_qa_no_trainer.py"


@dataclasses.dataclass(frozen=True)
class Habit:
  """Another tool's flag typed from habit.

  Attributes:
    whose: the tool it is a flag of.
    equivalents: this package's flags that do what it does ("--name" or "--name=value", a note
      after a space); a command names the first it has, else the command that has one.
    boolean: whether it is a boolean (its false value, --noname or --name=false, asks for the
      negated equivalent).
    when_false: for a boolean whose equivalent takes a value: what its false value asks for here
      (the user drops it).
    no_equivalent: why there is none here, and what to do instead.
  """
  whose: str
  equivalents: Tuple[str, ...] = ()
  boolean: bool = False
  when_false: str = ""
  no_equivalent: str = ""


# Flags of run_squad.py and run_qa.py (its TrainingArguments) typed from habit.
HABIT_FLAGS = {
    "output_dir": Habit(f"{RUN_SQUAD} and {RUN_QA}", ("--export_dir", "--model_dir")),
    "do_eval": Habit(RUN_QA, ("--do_predict",), boolean=True),
    "use_tpu": Habit(RUN_SQUAD, ("--distribution_strategy=tpu",), boolean=True,
                     when_false="no TPU is the default"),
    "tpu_name": Habit(RUN_SQUAD, ("--tpu",)),
    "num_tpu_cores": Habit(
        RUN_SQUAD, no_equivalent="--distribution_strategy=tpu trains on every core of --tpu"),
    "iterations_per_loop": Habit(RUN_SQUAD, ("--steps_per_loop",)),
    "verbose_logging": Habit(RUN_SQUAD, ("--verbosity=1",), boolean=True,
                             when_false="it is the default"),
    "model_name_or_path": Habit(RUN_QA, ("--init_checkpoint",)),
    "per_device_train_batch_size": Habit(RUN_QA, ("--train_batch_size",)),
    "per_device_eval_batch_size": Habit(RUN_QA, ("--predict_batch_size",)),
    "fp16": Habit(RUN_QA, ("--mixed_precision_dtype=float16",), boolean=True,
                  when_false="the precision is --mixed_precision_dtype=auto unless named"),
    "bf16": Habit(RUN_QA, ("--mixed_precision_dtype=bfloat16",), boolean=True,
                  when_false="the precision is --mixed_precision_dtype=auto unless named"),
    "validation_file": Habit(RUN_QA, ("--predict_file",)),
    "save_steps": Habit(RUN_QA, ("--save_checkpoints_steps",)),
    "eval_steps": Habit(RUN_QA, ("--eval_every_steps",)),
    "pad_to_max_length": Habit(RUN_QA, ("--nolength_buckets",), boolean=True,
                               when_false="batches pad to their longest window by default"),
    "preprocessing_num_workers": Habit(RUN_QA, ("--num_workers",)),
    "warmup_ratio": Habit(RUN_QA, ("--warmup_proportion",)),
    "warmup_steps": Habit(RUN_QA, ("--warmup_proportion (a share of the training steps)",)),
    "num_warmup_steps": Habit(RUN_QA_NO_TRAINER,
                              ("--warmup_proportion (a share of the training steps)",)),
    "max_eval_samples": Habit(RUN_QA, ("--max_eval_examples",)),
    "max_train_samples": Habit(
        RUN_QA, no_equivalent="train fewer --max_steps, or make records of fewer questions"),
    "eval_accumulation_steps": Habit(
        RUN_QA, no_equivalent="prediction moves each batch's logits off the device; none is "
        "needed"),
    "overwrite_output_dir": Habit(
        RUN_QA, boolean=True,
        no_equivalent="a --model_dir holding checkpoints is resumed; give a new "
        "--model_dir to start over"),
    "save_total_limit": Habit(RUN_QA, no_equivalent="--model_dir keeps the last 3 checkpoints"),
    "dataset_name": Habit(
        RUN_QA, no_equivalent="nothing is downloaded: make the records from SQuAD JSON files "
        "(--train_file, --predict_file)"),
    "test_file": Habit(RUN_QA, ("--predict_file",)),
    "logging_steps": Habit(RUN_QA, ("--log_steps",)),
    "eval_strategy": Habit(RUN_QA, ("--eval_every_steps",)),
    "evaluation_strategy": Habit(RUN_QA, ("--eval_every_steps",)),
    "save_strategy": Habit(RUN_QA, ("--save_checkpoints_steps",)),
    "logging_dir": Habit(
        RUN_QA, no_equivalent="TensorBoard's summaries go to --model_dir (train/ and eval/)"),
    "report_to": Habit(
        RUN_QA, no_equivalent="TensorBoard's summaries go to --model_dir (train/ and eval/)"),
    "group_by_length": Habit(RUN_QA, ("--length_buckets (the default)",), boolean=True),
    "no_cuda": Habit(RUN_QA, boolean=True, when_false="it is the default",
                     no_equivalent="the CPU is the default (--gpu trains on a GPU)"),
    "use_cpu": Habit(RUN_QA, boolean=True, when_false="it is the default",
                     no_equivalent="the CPU is the default (--gpu trains on a GPU)"),
    "local_rank": Habit(RUN_QA, ("--distribution_strategy=multi_worker_mirrored (hosts from "
                                 "TF_CONFIG)",)),
    "lr_scheduler_type": Habit(
        RUN_QA, no_equivalent="the learning rate warms up over --warmup_proportion, then decays "
        "linearly to 0, as google-research/bert's does"),
    "weight_decay": Habit(RUN_QA, no_equivalent="AdamW's decay is google-research/bert's, fixed"),
    "adam_epsilon": Habit(RUN_QA, no_equivalent="AdamW's epsilon is google-research/bert's, fixed"),
    "max_grad_norm": Habit(
        RUN_QA, no_equivalent="gradients are clipped to google-research/bert's global norm, fixed"),
    "dataloader_num_workers": Habit(
        RUN_QA, no_equivalent="tf.data reads and batches the records in parallel on its own"),
}


def _equivalent_name(ours):
  """The flag name of an equivalent ("--nolength_buckets" -> "nolength_buckets")."""
  return ours[2:].split(" ", 1)[0].partition("=")[0]


def _has_flag(name, flag_values):
  return name in flag_values or (name.startswith("no") and name[2:] in flag_values)


def habit_line(name, typed=None, next_argument=None, flag_values=flags.FLAGS):
  """One line for another tool's flag `name` typed here (`typed`: the argument as given, e.g.
  "--use_tpu=False"; `next_argument`: the one after it, a boolean's value when "False" or "0"):
  this command's equivalent, or the command that has one, or why there is none; None when `name`
  is not in HABIT_FLAGS. A false boolean (--nodo_eval, --use_tpu=false) gets the negated
  equivalent, or, where the equivalent is a value, `Habit.when_false`."""
  typed = typed or f"--{name}"
  negated = name not in HABIT_FLAGS and name.startswith("no")
  habit = HABIT_FLAGS.get(name[2:] if negated else name)
  if habit is None:
    return None
  if habit.boolean and "=" not in typed and (next_argument or "").lower() in _BOOLEAN_WORDS:
    typed = f"{typed} {next_argument}"  # absl would take it as a positional argument
  value = re.split("[= ]", typed + " ")[1].lower()
  false = habit.boolean and (negated or _BOOLEAN_WORDS.get(value) is False)
  head = f"{typed if false else '--' + name} is a flag of {habit.whose}"
  if false and habit.when_false:
    return f"{head}; drop it here: {habit.when_false}"
  for ours in habit.equivalents:
    flag = _equivalent_name(ours)
    if _has_flag(flag, flag_values) and not (false and "=" in ours):
      return f"{head}; here it is {'--no' + flag if false else ours}"
  for ours in habit.equivalents:
    flag = _equivalent_name(ours)
    owners = commands_taking(flag)
    if owners:
      return (f"{head}; the equivalent is {_in_words(owners)} "
              f"{'--no' + flag if false else ours}, not a flag of this command")
  if habit.no_equivalent:
    return f"{head}; there is none here: {habit.no_equivalent}"
  return None


def _in_words(names):
  """["a", "b", "c"] -> "a, b and c"."""
  return " and ".join(filter(None, [", ".join(names[:-1]), names[-1]]))


def commands_taking(name):
  """The other commands of the package with a flag `name` (or `noname`), as this process's user
  types them, e.g. ["squad-qa-records"] for "doc_stride" given to train.py."""
  by_command = _all_flag_names_by_command()
  if name.startswith("no") and not any(name in names for names in by_command.values()):
    name = name[2:]
  return [commands.command(script) for script, names in by_command.items() if name in names]


def _all_flag_names_by_command():
  """{console script: its settings' names}, read from `commands.CONFIG_CLASSES` (imported here,
  when a flag is unknown: each settings module loads without TensorFlow)."""
  by_command = {}
  for script, path in commands.CONFIG_CLASSES.items():
    module, _, class_name = path.rpartition(".")
    config_class = getattr(importlib.import_module(f"squad_qa.{module}"), class_name)
    by_command[script] = settings.names(config_class)
  return by_command


def parse_flags(argv, flag_values=flags.FLAGS):
  """absl `flags_parser` for `app.run`: parses `argv` and returns [argv[0]].

  Raises:
    SystemExit: (status 1, one line on stderr) an absl parsing error, or an argument left over.
  """
  program = program_name(argv[0] if argv else None)
  if "h" not in flag_values:  # -h, as most command-line tools take it, is absl's --help
    argv = [argv[0]] + ["--help" if token == "-h" else token for token in argv[1:]]
  try:
    leftover = flag_values(argv)[1:]
  except flags.UnrecognizedFlagError as e:
    unknown = unknown_flags(argv, flag_values)
    if e.flagname not in [name for name, _, _ in unknown]:  # e.g. a flag inside a --flagfile
      after = argv[argv.index(e.flagvalue) + 1:] if e.flagvalue in argv else []
      unknown = [(e.flagname, e.flagvalue, after[0] if after else None)]
    # Every unknown flag at once: a command copied from another tool has several.
    sys.exit("\n".join(f"{program}: {unknown_flag_line(*flag, flag_values)}" for flag in unknown))
  except flags.Error as e:
    sys.exit(f"{program}: {_flag_error_line(e)} (--helpfull lists the flags)")
  except SystemExit:
    if any(token.split("=")[0] in _HELP_FLAGS for token in argv[1:]):
      sys.exit(0)  # absl exits 1 after printing the help a user asked for
    raise
  if leftover:
    stray = stray_argument(argv, flag_values) or (leftover[0], None)
    sys.exit(f"{program}: {stray_argument_message(*stray, flag_values)}")
  return argv[:1]


def unknown_flags(argv, flag_values=flags.FLAGS):
  """[(name, the argument as typed, the value it takes or None)] for each flag in `argv[1:]` that
  `flag_values` lacks, in order (absl reports only the first)."""
  unknown = []
  for token, flag, value in _read_arguments(argv, flag_values):
    name = token.lstrip("-").split("=", 1)[0]
    if (token.startswith("-") and token not in ("-", "--") and flag is None and
        name not in ("flagfile", "undefok")):  # absl's own
      unknown.append((name, token, value))
  return unknown


def unknown_flag_line(name, typed, next_argument, flag_values=flags.FLAGS):
  """The line for flag `name` (typed as `typed`, `next_argument` after it) that this command
  lacks: another tool's equivalent (`habit_line`), the commands of this package that take it, or
  absl's nearest spellings."""
  habit = habit_line(name, typed, next_argument, flag_values)
  if habit:
    return habit
  owners = commands_taking(name)
  if owners:
    return (f"--{name} is a flag of {_in_words(owners)}, not of this command "
            f"(--helpfull lists its flags)")
  try:
    flag_values(["", f"--{name}"])  # raises with absl's suggestions, parsing nothing else
  except flags.UnrecognizedFlagError as e:
    return f"{str(e).splitlines()[0]} (--helpfull lists the flags)"
  return f"--{name} is not a flag of this command (--helpfull lists the flags)"


# absl's boolean parser raises ValueError with two arguments, which print as a tuple.
_NOT_A_BOOLEAN = re.compile(r"^flag --(\w+)=(.*): \('Non-boolean argument to boolean flag', .*\)$")


def _flag_error_line(error):
  """absl's line for a flag value it cannot parse, a boolean's in words ("expected true or
  false") instead of absl's tuple."""
  line = str(error).splitlines()[0]
  match = _NOT_A_BOOLEAN.match(line)
  if match:
    name, value = match.groups()
    return f"--{name}={value}: expected true or false (or --{name}, --no{name})"
  return line


def run(main, after_interrupt="nothing half-written is left; the same command starts again",
        terminated_exit_status=TERMINATED_EXIT_STATUS):
  """`absl.app.run(main)` with `parse_flags`; a `UserError` out of `main` prints
  `<command>: <message>` on stderr and exits with status 1, Ctrl-C `<command>: interrupted
  (Ctrl-C); <after_interrupt>` (a str, or a function returning one; None: nothing) with
  INTERRUPTED_EXIT_STATUS, SIGTERM `<command>: stopped by SIGTERM; <after_interrupt>` with
  `terminated_exit_status` (both after the command's cleanup ran)."""

  def stop(terminated):
    left = after_interrupt() if callable(after_interrupt) else after_interrupt
    progress.end_bar_line()
    how = "stopped by SIGTERM" if terminated else "interrupted (Ctrl-C)"
    print(f"{program_name()}: {how}{'; ' + left if left else ''}", file=sys.stderr)
    sys.exit(terminated_exit_status if terminated else INTERRUPTED_EXIT_STATUS)

  def main_reporting_user_errors(argv):
    try:
      return main(argv)
    except errors.UserError as e:
      exit_for_user_error(e)
    except KeyboardInterrupt as e:
      stop(isinstance(e, Terminated))
    except Exception:  # pylint: disable=broad-except
      if not _TERMINATED:
        raise
      stop(True)  # the SIGTERM's Terminated, wrapped on its way out

  _help_of(sys.modules[main.__module__])
  _TERMINATED.clear()
  previous = signal.signal(signal.SIGTERM, _raise_terminated)
  try:
    app.run(main_reporting_user_errors, flags_parser=parse_flags)
  except BrokenPipeError:
    # The reader of stdout left (`--help | head -1`): end quietly, as `cat` does; what Python
    # still holds for stdout goes nowhere rather than into a second error at exit.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(BROKEN_PIPE_EXIT_STATUS)
  finally:
    signal.signal(signal.SIGTERM, previous)


def exit_for_user_error(error):
  """Ends the process with `<command>: <error>` on stderr and exit status 1 (`error`: a
  `UserError`)."""
  sys.exit(f"{program_name()}: {error}")


def run_argparse(main):
  """Calls `main()`, a command that parses its own arguments (argparse: the clone's benchmarks and
  tools); a `UserError` out of it ends the command as under `run`: `<command>: <message>` on
  stderr, exit status 1, no traceback. Returns what `main` returns."""
  try:
    return main()
  except errors.UserError as e:
    exit_for_user_error(e)


@contextlib.contextmanager
def signals_end_at_once():
  """Within: SIGTERM and Ctrl-C (SIGINT) end the process at once, as the signal does (status 143
  or 130, no cleanup, no line), unless native code installs its own handler meanwhile. For native
  calls that hold Python's lock while they wait (a multi-worker strategy's start waits so for the
  cluster's other tasks, without a timeout): no Python signal handler, so neither `run`'s line
  and status nor its cleanup, could run before they return. Nothing within may leave a
  half-written output. Outside the main thread: nothing."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  previous = {
      signum: signal.signal(signum, signal.SIG_DFL) for signum in (signal.SIGTERM, signal.SIGINT)
  }
  try:
    yield
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)


def _help_of(command, flag_values=flags.FLAGS):
  """Makes `--help` show `command`'s docstring and flags under the command's name as typed.

  absl's help shows `__main__`'s docstring and `sys.argv[0]`'s key flags under `sys.argv[0]`, a
  path such as `<venv>/bin/squad-qa-train` or `<clone>/model/memory/__main__.py`. A console
  script's generated wrapper has neither docstring nor flags; `command` (the module of `main`)
  lends it both, naming the commands as console scripts. `sys.argv[0]` becomes the program's name
  ("squad-qa-train", "train.py", "model.memory"), which heads the flags.
  """
  main_module = sys.modules["__main__"]
  key_flags = flag_values.get_key_flags_for_module(sys.argv[0])
  if main_module is not command:
    if not main_module.__doc__:
      main_module.__doc__ = commands.name_commands_as_started(command.__doc__)
    key_flags = flag_values.get_key_flags_for_module(command.__name__)
    for flag in key_flags:
      flag.help = commands.name_commands_as_started(flag.help)
  sys.argv[0] = program_name()
  for flag in key_flags:
    flag_values.register_key_flag_for_module(sys.argv[0], flag)


def config_from_flags(config_class, flag_values=flags.FLAGS):
  """The command's config: `config_class` with each field read from the parsed flag of its name
  (the one place a command reads FLAGS). A `typed_flags` field gets the sorted names of the flags
  not at their default; a repeated flag's list becomes a tuple.

  Raises:
    errors.UsageError: a value the config refuses.
  """
  fields = {field.name for field in dataclasses.fields(config_class)}
  values = {name: flag_values[name].value for name in fields if name in flag_values}
  values = {name: tuple(v) if isinstance(v, list) else v for name, v in values.items()}
  if settings.TYPED_FLAGS_FIELD in fields:
    values[settings.TYPED_FLAGS_FIELD] = tuple(
        sorted(name for name in values if not flag_values[name].using_default_value))
  return config_class(**values)
