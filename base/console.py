"""A quiet console: imported before tensorflow, it cuts TensorFlow's and its libraries' log lines to
what a user can act on.

- `TF_CPP_MIN_LOG_LEVEL` defaults to 2 (no C++ INFO or WARNING), 3 without an NVIDIA driver, where
  the ERROR lines are the CUDA probe's (`failed call to cuInit`); a value the user set wins.
- absl's handler goes on the root logger before TensorFlow's logger is used (else each line
  shows twice) and passes INFO only from this project's files, and no deprecation notice of
  TensorFlow's (its own code calls deprecated functions, e.g. on SIGTERM).
- stdout is line-buffered, so printed lines reach a pipe in order with the log lines on stderr.

`SQUAD_QA_VERBOSE=1` keeps everything; absl's `-v 1` keeps every Python line.
"""

import functools
import logging
import os
import sys

from absl import logging as absl_logging

import squad_qa

VERBOSE_ENV = squad_qa.VERBOSE_ENV  # read when this module loads
LOG_LEVEL_ENV = squad_qa.LOG_LEVEL_ENV
verbose_from_environment = squad_qa.verbose_from_environment
has_nvidia_driver = squad_qa.has_nvidia_driver
QUIET_LEVEL = "2"
QUIET_LEVEL_WITHOUT_GPU_DRIVER = "3"

_PACKAGE_DIR = os.path.dirname(os.path.realpath(os.path.dirname(__file__)))


def cpp_log_level_to_set(environ=os.environ, nvidia_driver=None):
  """The `TF_CPP_MIN_LOG_LEVEL` (str) to put into `environ`, or None when the user set it (to
  another value than the package's import did) or asked for verbose logs. `nvidia_driver` None:
  `has_nvidia_driver()`."""
  user_set = environ.get(LOG_LEVEL_ENV) not in (None, squad_qa.log_level_set_here)
  if user_set or verbose_from_environment(environ):
    return None
  if nvidia_driver is None:
    nvidia_driver = has_nvidia_driver()
  return QUIET_LEVEL if nvidia_driver else QUIET_LEVEL_WITHOUT_GPU_DRIVER


@functools.lru_cache(maxsize=None)
def is_project_file(path):
  """True when `path` is in the package's folder or one of its Python packages (not a virtualenv
  inside a clone)."""
  relative = os.path.relpath(os.path.realpath(path), _PACKAGE_DIR)
  if relative.startswith(os.pardir + os.sep) or os.path.isabs(relative):
    return False
  top = relative.split(os.sep)[0]
  return top == relative or os.path.isfile(os.path.join(_PACKAGE_DIR, top, "__init__.py"))


def is_deprecation_notice(record):
  """Whether the logging.LogRecord `record` is TensorFlow's "... is deprecated and will be
  removed" notice (its logger names the caller, `tensorflow/python/util/deprecation.py`)."""
  return record.name == "tensorflow" and record.filename == "deprecation.py"


def is_notice_said_here(record):
  """Whether `record` is tf_keras' multi-line "mixed_float16 may run slowly because this machine
  does not have a GPU" check, which train.py says in one line of its own (with another GPU's
  compute capability the check is kept: it is then the only word on it)."""
  return (record.filename == "device_compatibility_check.py" and
          "does not have a GPU" in record.getMessage())


class ProjectInfoFilter(logging.Filter):
  """Passes WARNING and above but TensorFlow's deprecation notices and the notices this project
  says itself (`is_notice_said_here`), and INFO from this project's files (all when `verbose` or
  at absl verbosity DEBUG)."""

  def __init__(self, verbose=False):
    super().__init__()
    self.verbose = verbose

  def filter(self, record):
    if self.verbose:
      return True
    # absl's --verbosity=1 (-v 1) is parsed after this module loads, so it is read per record.
    if absl_logging.get_verbosity() >= absl_logging.DEBUG:
      return True
    if record.levelno >= logging.WARNING:
      return record.levelno >= logging.ERROR or not (is_deprecation_notice(record) or
                                                     is_notice_said_here(record))
    return is_project_file(record.pathname)


def apply():
  """Quiets the console (module docstring); returns [`LOG_LEVEL_ENV`] when it was set too late
  (tensorflow already imported), else []."""
  level = cpp_log_level_to_set()
  if level is not None:
    os.environ[LOG_LEVEL_ENV] = level
  # Before TensorFlow's logger is first used, so that it gets no handler of its own.
  absl_logging.use_absl_handler()
  handler = absl_logging.get_absl_handler()
  if not any(isinstance(f, ProjectInfoFilter) for f in handler.filters):
    handler.addFilter(ProjectInfoFilter(verbose_from_environment()))
  reconfigure = getattr(sys.stdout, "reconfigure", None)  # absent on some replaced stdouts
  if reconfigure is not None:
    reconfigure(line_buffering=True)
  return [LOG_LEVEL_ENV] if level is not None and "tensorflow" in sys.modules else []


apply()
