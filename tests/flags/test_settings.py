"""A config field declares its flag once: name, type, default, help and rule; GivenFields tells a
value the user gave from a default."""

import dataclasses
from typing import Optional, Tuple, Union

from absl import flags
import pytest

from squad_qa import errors
from squad_qa.flags import command_line
from squad_qa.flags import settings
from squad_qa.model.memory import plan
from squad_qa.preprocess import records_config
from squad_qa.serving import ask_config
from squad_qa.serving import export_config
from squad_qa.tasks import train_config


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Group(settings.Settings):
  steps: Optional[int] = settings.setting(None, "Steps.", lower_bound=1)
  rate: float = settings.setting(0.5, "Rate.", above=0)
  count: int = settings.setting(0, "Count.", check=settings.at_least(0, "0 (off) or more"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Config(_Group, settings.GivenFields):
  name: str = settings.setting("out", "Name.")
  fast: bool = settings.setting(True, "Fast.")
  mode: str = settings.setting("a", "Mode.", choices=("a", "b"))
  question: Optional[Tuple[str, ...]] = settings.setting(None, "Questions.")
  batch: Union[int, str] = settings.setting(8, "Batch.", parser=settings.BatchSizeParser(),
                                            check=settings.check_batch_size)
  buckets: Union[None, str, Tuple[int,
                                  ...]] = settings.setting("auto", "Buckets.",
                                                           parser=settings.TokenCountsParser(),
                                                           flag_class=settings.OptionalValueFlag)
  doc_stride: Optional[int] = None
  n_best_size: int = 20
  typed_flags: Optional[tuple] = None

  def check(self):
    if self.mode == "b" and not self.fast:
      raise errors.UsageError("--mode=b needs --fast")


@pytest.fixture
def flag_values():
  values = flags.FlagValues()
  settings.define_flags(_Config, values)
  return values


def parse(flag_values, *argv):
  """The config of a command line, or the one line the command would stop with."""
  try:
    command_line.parse_flags(["prog", *argv], flag_values)
    return command_line.config_from_flags(_Config, flag_values)
  except SystemExit as e:
    return str(e.code)
  except errors.UsageError as e:
    return str(e)


def test_a_field_becomes_a_flag_with_its_name_type_default_and_help(flag_values):
  kinds = {
      name: (flag_values[name].flag_type(), flag_values[name].default,
             flag_values[name].help.split(";")[0]) for name in settings.names(_Config)
  }
  assert kinds == {
      "steps": ("int", None, "Steps."),
      "rate": ("float", 0.5, "Rate."),
      "count": ("int", 0, "Count."),
      "name": ("string", "out", "Name."),
      "fast": ("bool", True, "Fast."),
      "mode": ("string enum", "a", "<a|b>: Mode."),
      "question": ("multi string", None, "Questions."),
      "batch": ("int or 'auto'", 8, "Batch."),
      "buckets": ("'auto' or int list", "auto", "Buckets."),
  }
  assert flag_values["buckets"].boolean and not flag_values["batch"].boolean  # --nobuckets
  # --help shows the default's text, not the 'true' absl gives a boolean flag.
  assert [flag_values[name].default_as_str for name in ("buckets", "fast")] == ["'auto'", "'true'"]
  assert "typed_flags" not in flag_values and "doc_stride" not in flag_values  # no help: no flag
  assert settings.defaults(_Config) == {
      "steps": None,
      "rate": 0.5,
      "count": 0,
      "name": "out",
      "fast": True,
      "mode": "a",
      "question": None,
      "batch": 8,
      "buckets": "auto"
  }


def test_flags_parse_into_the_config(flag_values):
  config = parse(flag_values, "--steps=3", "--nofast", "--question=q1", "--question=q2",
                 "--batch=auto", "--buckets=64,128", "--name=out")
  assert config == _Config(steps=3, fast=False, question=("q1", "q2"), batch="auto",
                           buckets=(64, 128),
                           typed_flags=("batch", "buckets", "fast", "name", "question", "steps"))
  assert config.given("name") and not config.given("rate")
  assert parse(flag_values, "--nobuckets").buckets is None
  assert parse(flag_values, "--buckets").buckets == "auto"


@pytest.mark.parametrize(
    "argv, line",
    [
        (["--steps=0"], "prog: flag --steps=0: 0 is not a positive integer (--helpfull lists the "
         "flags)"),
        (["--rate=0"
         ], "prog: flag --rate=0.0: --rate must be above 0 (--helpfull lists the flags)"),
        (["--rate=1e309"], "--rate=inf: must be a finite number"),
        (["--mode=c"], "prog: flag --mode=c: value should be one of <a|b> (--helpfull lists the "
         "flags)"),
        (["--batch=0"], "prog: flag --batch=0: expected a positive integer or 'auto', got '0' "
         "(--helpfull lists the flags)"),
        (["--buckets=128,64"], "prog: flag --buckets=128,64: expected increasing positive token "
         "counts, got '128,64' (--helpfull lists the flags)"),
        (["--count=-1"
         ], "--count=-1: must be 0 (off) or more"),  # by the config, as the flags are read
        (["--mode=b", "--nofast"], "--mode=b needs --fast"),
    ])
def test_a_bad_value_is_refused_in_one_line_before_the_command_runs(flag_values, argv, line):
  assert parse(flag_values, *argv) == line


@pytest.mark.parametrize("values, line", [
    ({
        "steps": 0
    }, "--steps=0: must be at least 1"),
    ({
        "rate": -1.0
    }, "--rate must be above 0"),
    ({
        "rate": float("inf")
    }, "--rate=inf: must be a finite number"),
    ({
        "count": -1
    }, "--count=-1: must be 0 (off) or more"),
    ({
        "mode": "c"
    }, "--mode=c: expected one of a, b"),
    ({
        "batch": 0
    }, "--batch=0: expected a positive integer or 'auto'"),
    ({
        "mode": "b",
        "fast": False
    }, "--mode=b needs --fast"),
])
def test_the_same_rules_refuse_a_config_built_in_python(values, line):
  with pytest.raises(errors.UsageError) as error:
    _Config(**values)
  assert str(error.value) == line


def test_defining_a_defined_flag_changes_nothing(flag_values):

  @dataclasses.dataclass(frozen=True, kw_only=True)
  class Other(settings.Settings):
    name: str = settings.setting("elsewhere", "Another name.")

  settings.define_flags(Other, flag_values)
  settings.define_flags(_Config, flag_values)
  assert (flag_values["name"].default, flag_values["name"].help) == ("out", "Name.")


def test_a_variant_keeps_the_type_and_rule_with_its_own_default():

  @dataclasses.dataclass(frozen=True, kw_only=True)
  class Variant(settings.Settings):
    steps: Optional[int] = settings.variant(_Group, "steps", default=5, help="More steps.")

  values = flags.FlagValues()
  settings.define_flags(Variant, values)
  assert (values["steps"].default, values["steps"].help) == (5, "More steps.")
  with pytest.raises(errors.UsageError, match="--steps=0: must be at least 1"):
    Variant(steps=0)


def test_the_flags_are_key_flags_of_the_module_that_defines_them(flag_values):
  assert {f.name for f in flag_values.get_key_flags_for_module(__name__)
         } == set(settings.names(_Config))


@pytest.mark.parametrize("config_class, defaults", [
    (train_config.TrainConfig, {
        "n_best_size": 20,
        "max_answer_length": 30,
        "learning_rate": 5e-5,
        "train_batch_size": 32,
        "length_buckets": "auto",
        "num_train_epochs": 2.0
    }),
    (records_config.RecordsConfig, {
        "max_seq_length": 384,
        "doc_stride": 128,
        "max_query_length": 64,
        "do_lower_case": True
    }),
    (export_config.ExportConfig, {
        "n_best_size": 20,
        "doc_stride": None,
        "serving_precision": "float32",
        "window_batch_size": 32
    }),
    (ask_config.AskConfig, {
        "n_best_size": None,
        "max_answer_length": None,
        "export_dir": "export"
    }),
    (plan.PlannerConfig, {
        "max_seq_length": None,
        "train_batch_size": None
    }),
])
def test_each_command_s_flags_are_its_config_s_settings(config_class, defaults):
  """Every setting of a command's config is a flag with the config's default and a help text."""
  values = flags.FlagValues()
  settings.define_flags(config_class, values)
  assert sorted(values) == sorted(settings.names(config_class))
  for name in values:
    assert values[name].default == config_class.__dataclass_fields__[name].default, name
    assert values[name].help, name
  assert {name: values[name].default for name in defaults} == defaults


def test_from_the_command_line_a_typed_flag_is_given_even_at_its_default():
  config = _Config(n_best_size=20, typed_flags=("n_best_size",))
  assert config.given("n_best_size")
  assert not config.given("doc_stride")


def test_from_python_a_field_is_given_when_it_differs_from_its_default():
  assert _Config(doc_stride=64).given("doc_stride")
  assert not _Config(n_best_size=20).given("n_best_size")
  assert not _Config().given("doc_stride")
