"""GivenFields: a value typed on the command line, or set in Python, against a default."""

import dataclasses

from squad_qa.tasks import typed_flags


@dataclasses.dataclass(frozen=True)
class _Config(typed_flags.GivenFields):
  doc_stride: int = None
  n_best_size: int = 20
  typed_flags: tuple = None


def test_from_the_command_line_a_typed_flag_is_given_even_at_its_default():
  config = _Config(n_best_size=20, typed_flags=("n_best_size",))
  assert config.given("n_best_size")
  assert not config.given("doc_stride")


def test_from_python_a_field_is_given_when_it_differs_from_its_default():
  assert _Config(doc_stride=64).given("doc_stride")
  assert not _Config(n_best_size=20).given("n_best_size")
  assert not _Config().given("doc_stride")
