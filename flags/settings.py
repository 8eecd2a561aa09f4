"""A setting is declared once, as a field of a frozen config dataclass (`setting`: the flag's
help, validation and parser), and its absl flag is made from that field (`define_flags`);
`flags.command_line.config_from_flags` reads the parsed flags back into one config.

Settings shared by commands live in small groups of the layer that owns them, which a config
inherits (attributes stay flat). Each setting's rule runs when a config is built, then the
config's `check`. This module imports only absl and the standard library, so flags parse before
TensorFlow loads.
"""

import dataclasses
import math
import re
import types
import typing
from typing import Any, Callable, Optional, Tuple

from absl import flags

from squad_qa import errors

# Flags defined here belong to the module calling `define_flags`, so its --help lists them.
flags.disclaim_key_flags()

_METADATA_KEY = "squad_qa.flags.settings"
# A config field of this name receives the names of the config's flags that were typed.
TYPED_FLAGS_FIELD = "typed_flags"
OUTPUT_FORMATS = ("text", "json")  # the --format of commands that print results


@dataclasses.dataclass(frozen=True)
class Spec:
  """What a field says about its flag besides name, type and default (None: no such rule; a
  None value is never checked).

  Attributes:
    help: the flag's help text.
    choices: the allowed values (a str setting becomes an enum flag).
    lower_bound: the smallest allowed number (also absl's bound).
    above: a number the value must exceed.
    check: a callable(name, value) raising `errors.UsageError`, run on the config (`at_least`).
    parser: an absl `ArgumentParser` for a type the annotation cannot tell (e.g. int or 'auto').
    flag_class: an absl `Flag` subclass taking (parser, serializer, name, default, help).
  """
  help: str
  choices: Optional[Tuple[Any, ...]] = None
  lower_bound: Optional[float] = None
  above: Optional[float] = None
  check: Optional[Callable[[str, Any], None]] = None
  parser: Optional[flags.ArgumentParser] = None
  flag_class: Optional[type] = None


def setting(default, help, *, choices=None, lower_bound=None, above=None, check=None, parser=None,
            flag_class=None):  # pylint: disable=redefined-builtin
  """A dataclass field that is also the absl flag of the same name (`Spec` says what each
  argument means). Returns a `dataclasses.Field`."""
  spec = Spec(help,
              tuple(choices) if choices is not None else None, lower_bound, above, check, parser,
              flag_class)
  return dataclasses.field(default=default, metadata={_METADATA_KEY: spec})


def variant(config_class, name, **changes):
  """The setting `name` of `config_class` with `changes` (default and any `Spec` attribute), as a
  `dataclasses.Field`.

  Raises:
    KeyError: `config_class` has no setting `name`.
  """
  field = {f.name: f for f in setting_fields(config_class)}[name]
  default = changes.pop("default", field.default)
  return dataclasses.field(default=default,
                           metadata={_METADATA_KEY: dataclasses.replace(spec_of(field), **changes)})


def spec_of(field):
  """The `Spec` of a dataclass field, or None for a field that is not a setting."""
  return field.metadata.get(_METADATA_KEY)


def setting_fields(config_class):
  """The fields of a dataclass (class or instance) that are settings, in field order."""
  return tuple(f for f in dataclasses.fields(config_class) if spec_of(f) is not None)


def names(config_class):
  """The names of the settings of `config_class`, in field order (a tuple of str)."""
  return tuple(f.name for f in setting_fields(config_class))


def defaults(config_class):
  """{name: default} of the settings of `config_class`, in field order."""
  return {f.name: f.default for f in setting_fields(config_class)}


def values(config, group_class):
  """{name: value} of the settings of `config` that `group_class` (a group it inherits)
  declares, in field order."""
  return {name: getattr(config, name) for name in names(group_class)}


def check_value(name, value, spec):
  """Refuses a value of setting `name` that its `Spec` does not allow; None passes.

  Raises:
    errors.UsageError: "--name=value: ..." (or the `check`'s own line).
  """
  if value is None:
    return
  if spec.choices is not None and value not in spec.choices:
    raise errors.UsageError(f"--{name}={value}: expected one of "
                            f"{', '.join(str(c) for c in spec.choices)}")
  if ((spec.lower_bound is not None or spec.above is not None) and isinstance(value, float) and
      not math.isfinite(value)):  # nan passes no comparison; inf is no size
    raise errors.UsageError(f"--{name}={value}: must be a finite number")
  if spec.lower_bound is not None and value < spec.lower_bound:
    raise errors.UsageError(f"--{name}={value}: must be at least {spec.lower_bound}")
  if spec.above is not None and not value > spec.above:
    raise errors.UsageError(_above_message(name, spec.above))
  if spec.check is not None:
    spec.check(name, value)


def _above_message(name, bound):
  return f"--{name} must be above {bound}"


def at_least(bound, words=None):
  """A `Spec.check` refusing values below `bound`: "--name=value: must be at least <bound>", or
  "must be <words>" (e.g. "0 (off) or more"); and a float that is not finite (nan, inf)."""

  def check(name, value):
    if isinstance(value, float) and not math.isfinite(value):  # nan passes `<`; inf is no size
      raise errors.UsageError(f"--{name}={value}: must be a finite number")
    if value < bound:
      raise errors.UsageError(f"--{name}={value}: must be {words or f'at least {bound}'}")

  return check


def within(low, high):
  """A `Spec.check` refusing values outside [low, high]: "--name=value: must be from low to
  high"."""

  def check(name, value):
    if not low <= value <= high:
      raise errors.UsageError(f"--{name}={value}: must be from {low} to {high}")

  return check


class Settings:
  """Base of every config: construction checks each setting (`check_value`), then `check`
  (raising errors.UsageError)."""

  def __post_init__(self):
    for field in setting_fields(self):
      check_value(field.name, getattr(self, field.name), spec_of(field))
    self.check()

  def check(self):
    """Rules between settings; raises `errors.UsageError`. The base has none."""


class GivenFields:
  """Mixin for a config with a `typed_flags` field: the names of the flags typed on the command
  line, or None for a config built in Python."""

  def given(self, name):
    """Whether the user typed flag `name` (with `typed_flags` None: set it off its default)."""
    if self.typed_flags is None:
      return getattr(self, name) != self.__dataclass_fields__[name].default
    return name in self.typed_flags


def define_flags(config_class, flag_values=flags.FLAGS):
  """Defines the absl flag of every setting of `config_class` that `flag_values` lacks.

  Raises:
    TypeError: a setting whose annotation gives no flag type and that has no `parser`.
  """
  hints = typing.get_type_hints(config_class)
  for field in setting_fields(config_class):
    if field.name not in flag_values:
      _define(field.name, hints[field.name], field.default, spec_of(field), flag_values)


def _value_type(annotation):
  """The type of a setting's value: Optional[X] -> X; Tuple[str, ...] -> tuple."""
  if typing.get_origin(annotation) in (typing.Union, types.UnionType):
    kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
    if len(kinds) == 1:
      return _value_type(kinds[0])
    return None
  if typing.get_origin(annotation) is tuple and typing.get_args(annotation) == (str, ...):
    return tuple
  return annotation


def _define(name, annotation, default, spec, flag_values):
  """Defines one flag from a setting (see `define_flags`)."""
  kind = _value_type(annotation)
  if spec.flag_class is not None:
    flags.DEFINE_flag(spec.flag_class(spec.parser, None, name, default, spec.help), flag_values)
  elif spec.parser is not None:
    flags.DEFINE(spec.parser, name, default, spec.help, flag_values,
                 serializer=flags.ArgumentSerializer())
  elif spec.choices is not None:
    flags.DEFINE_enum(name, default, spec.choices, spec.help, flag_values=flag_values)
  elif kind is bool:
    flags.DEFINE_bool(name, default, spec.help, flag_values=flag_values)
  elif kind is int:
    flags.DEFINE_integer(name, default, spec.help, lower_bound=spec.lower_bound,
                         flag_values=flag_values)
  elif kind is float:
    flags.DEFINE_float(name, default, spec.help, lower_bound=spec.lower_bound,
                       flag_values=flag_values)
  elif kind is str:
    flags.DEFINE_string(name, default, spec.help, flag_values=flag_values)
  elif kind is tuple:
    flags.DEFINE_multi_string(name, default, spec.help, flag_values=flag_values)
  else:
    raise TypeError(f"setting {name}: no flag type for {annotation!r}; give it a parser")
  if spec.above is not None:
    flags.register_validator(name, lambda value: value is None or value > spec.above,
                             message=_above_message(name, spec.above), flag_values=flag_values)


class BatchSizeParser(flags.ArgumentParser):
  """Parses a positive integer or "auto" (absl flag parser)."""
  syntactic_help = "a positive integer or 'auto'"

  def parse(self, argument):
    if isinstance(argument, int) or argument in (None, "auto"):
      value = argument
    else:
      text = str(argument).strip().lower()
      value = text if text == "auto" else int(text) if text.lstrip("-").isdigit() else None
      if value is None:
        raise ValueError(f"expected a positive integer or 'auto', got {argument!r}")
    if isinstance(value, int) and value < 1:
      raise ValueError(f"expected a positive integer or 'auto', got {argument!r}")
    return value

  def flag_type(self):
    return "int or 'auto'"


def check_batch_size(name, value):
  """A `Spec.check` for a `BatchSizeParser` setting: a positive int or "auto"."""
  if value != "auto" and (not isinstance(value, int) or value < 1):
    raise errors.UsageError(f"--{name}={value}: expected a positive integer or 'auto'")


class TokenCountsParser(flags.ArgumentParser):
  """Parses "auto" (also a bare --name), "false" (--noname) or comma-separated increasing token
  counts; gives "auto", None or a tuple of ints (absl flag parser)."""
  syntactic_help = "'auto', or increasing token counts separated by commas, e.g. 64,128,256"

  def parse(self, argument):
    if argument is None or isinstance(argument, tuple):
      return argument
    text = str(argument).strip().lower()
    if text in ("auto", "true"):
      return "auto"
    if text in ("false", "none", ""):
      return None
    try:
      values = tuple(int(v) for v in text.split(","))
    except ValueError:
      raise ValueError(
          f"expected 'auto' or token counts like 64,128,256, got {argument!r}") from None
    if not increasing_token_counts(values):
      raise ValueError(f"expected increasing positive token counts, got {argument!r}")
    return values

  def flag_type(self):
    return "'auto' or int list"


_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
DURATION_FORMS = "90s, 20m, 1h or 1h30m"


class DurationParser(flags.ArgumentParser):
  """Parses a duration of hours, minutes and seconds written like 90s, 20m, 1h or 1h30m (absl flag
  parser); gives whole seconds (an int above 0)."""
  syntactic_help = f"a duration: {DURATION_FORMS}"

  def parse(self, argument):
    if argument is None or isinstance(argument, (int, float)):
      return argument
    text = str(argument).strip().lower()
    found = _DURATION.fullmatch(text)
    seconds = None
    if text and found:
      hours, minutes, secs = (int(part or 0) for part in found.groups())
      seconds = hours * 3600 + minutes * 60 + secs
    if not seconds:
      raise ValueError(f"expected a duration above 0 like {DURATION_FORMS} (hours h, minutes m, "
                       f"seconds s, in that order), got {argument!r}")
    return seconds

  def flag_type(self):
    return "duration"


def format_duration(seconds):
  """Seconds as `DurationParser` reads them back: 90 -> "1m30s", 1200 -> "20m", 5400 -> "1h30m"."""
  seconds = int(round(seconds))
  parts = [(seconds // 3600, "h"), (seconds % 3600 // 60, "m"), (seconds % 60, "s")]
  return "".join(f"{value}{unit}" for value, unit in parts if value) or "0s"


def increasing_token_counts(values):
  """Whether `values` (a tuple of int) are positive and strictly increasing."""
  return all(v >= 1 for v in values) and all(a < b for a, b in zip(values, values[1:]))


class OptionalValueFlag(flags.Flag):
  """A flag with a value that also has the --noname form (absl offers that to booleans only):
  --noname sets None."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, boolean=True, **kwargs)

  def _serialize(self, value):
    if value is None:
      return f"--no{self.name}"
    return f"--{self.name}={self._text(value)}"

  def _get_parsed_value_as_string(self, value):
    """The default as --help shows it: its text ('auto', '64,128'), not a boolean's 'true'."""
    return None if value is None else repr(self._text(value))

  @staticmethod
  def _text(value):
    return value if isinstance(value, str) else ",".join(str(v) for v in value)
