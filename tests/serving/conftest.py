"""The `served` fixture: one taught, exported tiny model for all serving tests."""

import pytest

from tests.serving import taught_model


@pytest.fixture(scope="package")
def served(tmp_path_factory):
  """taught_model.export_taught_model's dict, built once for tests/serving."""
  return taught_model.export_taught_model(tmp_path_factory.mktemp("serving"))
