"""benchmarks/serving_agreement.py: it defines only the flags it reads, and checks their values."""

from absl import flags
import pytest

from benchmarks import serving_agreement
from squad_qa import errors
from squad_qa.flags import settings


def test_only_the_flags_it_reads_are_defined():
  flag_values = flags.FlagValues()
  settings.define_flags(serving_agreement.AgreementConfig, flag_values)
  assert set(flag_values) == {
      "export_dir", "predict_file", "predictions_file", "batch_size", "output_file", "show",
      "use_serve_features"
  }
  assert flag_values["batch_size"].default == 32 and flag_values["show"].default == 10


@pytest.mark.parametrize("name, value, line", [
    ("batch_size", 0, "^--batch_size=0: must be at least 1$"),
    ("show", -1, r"^--show=-1: must be 0 \(none\) or more$"),
    ("predictions_file", "/nope.json", "^--predictions_file=/nope.json: no such file$"),
])
def test_a_value_it_cannot_use_is_one_line(name, value, line):
  with pytest.raises(errors.UserError, match=line):
    serving_agreement.AgreementConfig(**{name: value})
  assert serving_agreement.AgreementConfig(show=0, batch_size=1).export_dir == "export"
