"""base/console.py: the C++ log level it sets, the Python log lines its filter lets through."""

import logging
import os
import warnings

from absl import logging as absl_logging
import pytest

import squad_qa
from squad_qa.base import console

# The folder of the `squad_qa` being tested: the clone under `pip install -e .`, site-packages'
# squad_qa/ under `pip install .` (log records name the files that were imported).
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.realpath(console.__file__)))


def record(level, path):
  return logging.LogRecord("absl", level, path, 1, "a message", None, None)


@pytest.mark.parametrize(
    "environ, driver, expected",
    [
        ({}, False, console.QUIET_LEVEL_WITHOUT_GPU_DRIVER),  # hides the cuInit probe's ERROR
        ({}, True, console.QUIET_LEVEL),  # a GPU machine keeps the C++ runtime's errors
        ({
            console.LOG_LEVEL_ENV: "0"
        }, False, None),  # the user's value wins
        ({
            console.VERBOSE_ENV: "1"
        }, False, None),  # TensorFlow's default
        ({
            console.VERBOSE_ENV: "0"
        }, True, console.QUIET_LEVEL),
    ])
def test_cpp_log_level(environ, driver, expected):
  assert console.cpp_log_level_to_set(environ, nvidia_driver=driver) == expected


def test_project_files_are_told_from_libraries():
  assert console.is_project_file(os.path.join(PACKAGE_DIR, "tasks", "trainer.py"))
  assert console.is_project_file(os.path.join(PACKAGE_DIR, "train.py"))
  assert not console.is_project_file(absl_logging.__file__)
  # In the package's folder but not in one of its packages, e.g. a virtualenv made in a clone.
  assert not console.is_project_file(os.path.join(PACKAGE_DIR, ".venv", "lib", "x.py"))


def test_filter_keeps_warnings_and_the_projects_info_lines():
  project = os.path.join(PACKAGE_DIR, "tasks", "trainer.py")
  library = absl_logging.__file__
  quiet = console.ProjectInfoFilter()
  assert quiet.filter(record(logging.INFO, project))
  assert not quiet.filter(record(logging.INFO, library))
  assert quiet.filter(record(logging.WARNING, library))
  assert quiet.filter(record(logging.ERROR, library))
  assert console.ProjectInfoFilter(verbose=True).filter(record(logging.INFO, library))
  verbosity = absl_logging.get_verbosity()
  absl_logging.set_verbosity(absl_logging.DEBUG)  # --verbosity=1
  try:
    assert quiet.filter(record(logging.INFO, library))
  finally:
    absl_logging.set_verbosity(verbosity)


@pytest.mark.parametrize("value, verbose", [("1", True), ("true", True), ("0", False),
                                            ("false", False), ("", False)])
def test_verbose_environment(value, verbose):
  assert console.verbose_from_environment({console.VERBOSE_ENV: value}) == verbose
  assert not console.verbose_from_environment({})


@pytest.mark.parametrize("set_here, expected", [("1", console.QUIET_LEVEL), (None, None)])
def test_the_level_the_package_import_set_is_raised_by_a_command(monkeypatch, set_here, expected):
  """Importing squad_qa sets level 1 for the Python API; a command raises it, unless the user set
  that value."""
  monkeypatch.setattr(squad_qa, "log_level_set_here", set_here)
  assert console.cpp_log_level_to_set({console.LOG_LEVEL_ENV: "1"}, nvidia_driver=True) == expected


class KeptRecords(logging.Handler):
  """A handler that keeps the records it is given (`records`)."""

  def __init__(self):
    super().__init__()
    self.records = []

  def emit(self, record):
    self.records.append(record)


def test_tensorflow_deprecation_notices_are_dropped_unless_verbose():
  """TensorFlow's own code calls deprecated functions (its PreemptionCheckpointHandler, on
  SIGTERM); the notice, a WARNING, is nothing a user can act on."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  kept = KeptRecords()
  tf.get_logger().addHandler(kept)
  try:
    tf.compat.v1.to_float(tf.constant(1))  # deprecated: "Use `tf.cast` instead."
  finally:
    tf.get_logger().removeHandler(kept)
  notice = next(r for r in kept.records if "is deprecated and will be removed" in r.getMessage())
  assert console.is_deprecation_notice(notice)
  assert not console.ProjectInfoFilter().filter(notice)
  assert console.ProjectInfoFilter(verbose=True).filter(notice)
  error = logging.LogRecord("tensorflow", logging.ERROR, notice.pathname, 1, "failed", None, None)
  assert console.ProjectInfoFilter().filter(error)
  assert not console.is_deprecation_notice(record(logging.WARNING, absl_logging.__file__))


def test_tf_keras_cpu_float16_notice_is_dropped_as_train_py_says_it():
  """tf_keras' mixed_float16 check without a GPU (the real record, made by its function) is
  replaced by train.py's own line; its other outcomes (a GPU of too low a compute capability) are
  kept."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_keras.src.mixed_precision import device_compatibility_check  # pylint: disable=g-import-not-at-top

  kept = KeptRecords()
  tf.get_logger().addHandler(kept)
  try:
    device_compatibility_check._log_device_compatibility_check("mixed_float16", [])  # no GPU
    device_compatibility_check._log_device_compatibility_check("mixed_float16", [{
        "device_name": "Old GPU",
        "compute_capability": (6, 1)
    }])
  finally:
    tf.get_logger().removeHandler(kept)
  no_gpu, old_gpu = kept.records
  assert "does not have a GPU" in no_gpu.getMessage() and console.is_notice_said_here(no_gpu)
  assert not console.ProjectInfoFilter().filter(no_gpu)
  assert console.ProjectInfoFilter(verbose=True).filter(no_gpu)
  assert "Old GPU" in old_gpu.getMessage() and console.ProjectInfoFilter().filter(old_gpu)


@pytest.mark.parametrize("verbose, shown", [(False, 0), (True, 1)])
def test_google_s_python_version_notice_is_hidden_unless_verbose(verbose, shown):
  """`import tensorflow` imports google-api-core, which warns on every run under a Python that
  Google no longer supports (3.10 from late 2026); the commands support it."""
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    squad_qa.hide_python_version_warnings(verbose)
    warnings.warn_explicit(
        "You are using a non-supported Python version (3.10.13). Google will not post any "
        "further updates to google.api_core supporting this Python version.", FutureWarning,
        "_python_version_support.py", 223, module="google.api_core._python_version_support")
    warnings.warn_explicit("another library's notice", FutureWarning, "other.py", 1, module="other")
  assert [str(w.message) for w in caught][-1] == "another library's notice"
  assert len(caught) == 1 + shown
