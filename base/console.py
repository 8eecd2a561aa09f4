"""A quiet console: imported before tensorflow, it cuts TensorFlow's and its libraries' log lines to
what a user can act on.

- `TF_CPP_MIN_LOG_LEVEL` defaults to 2 (no C++ INFO or WARNING), 3 without an NVIDIA driver, where
  the ERROR lines are the CUDA probe's (`failed call to cuInit`); a value the user set wins.
- absl's handler goes on the root logger before TensorFlow's logger is used (else each line
  shows twice) and passes INFO only from this project's files.
- stdout is line-buffered, so printed lines reach a pipe in order with the log lines on stderr.

`SQUAD_QA_VERBOSE=1` keeps everything; absl's `-v 1` keeps every Python line.
"""

import contextlib
import ctypes
import functools
import logging
import os
import sys
import tempfile

from absl import logging as absl_logging

# Set to anything but "", "0" or "false", it keeps every log line (read when this module loads).
VERBOSE_ENV = "SQUAD_QA_VERBOSE"
# TensorFlow's C++ log level variable: 0 all lines, 1 no INFO, 2 no WARNING either, 3 no ERROR.
LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
QUIET_LEVEL = "2"
QUIET_LEVEL_WITHOUT_GPU_DRIVER = "3"

# The NVIDIA driver's kernel module folder, and its library (the one way to find it under WSL2).
_NVIDIA_DRIVER_FOLDER = "/proc/driver/nvidia"
_CUDA_DRIVER_LIBRARY = "libcuda.so.1"
_PACKAGE_DIR = os.path.dirname(os.path.realpath(os.path.dirname(__file__)))


def verbose_from_environment(environ=os.environ):
  """True when `SQUAD_QA_VERBOSE` in `environ` (a mapping of str) asks for every log line."""
  return environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false")


def cpp_log_level_to_set(environ=os.environ, nvidia_driver=None):
  """The `TF_CPP_MIN_LOG_LEVEL` (str) to put into `environ`, or None when the user set it or asked
  for verbose logs. `nvidia_driver` None: `has_nvidia_driver()`."""
  if LOG_LEVEL_ENV in environ or verbose_from_environment(environ):
    return None
  if nvidia_driver is None:
    nvidia_driver = has_nvidia_driver()
  return QUIET_LEVEL if nvidia_driver else QUIET_LEVEL_WITHOUT_GPU_DRIVER


def has_nvidia_driver():
  """True when TensorFlow's CUDA probe can find an NVIDIA driver."""
  if os.path.isdir(_NVIDIA_DRIVER_FOLDER):
    return True
  try:
    ctypes.CDLL(_CUDA_DRIVER_LIBRARY)
  except OSError:
    return False
  return True


@functools.lru_cache(maxsize=None)
def is_project_file(path):
  """True when `path` is in the package's folder or one of its Python packages (not a virtualenv
  inside a clone)."""
  relative = os.path.relpath(os.path.realpath(path), _PACKAGE_DIR)
  if relative.startswith(os.pardir + os.sep) or os.path.isabs(relative):
    return False
  top = relative.split(os.sep)[0]
  return top == relative or os.path.isfile(os.path.join(_PACKAGE_DIR, top, "__init__.py"))


class ProjectInfoFilter(logging.Filter):
  """Passes WARNING and above, and INFO from this project's files (all when `verbose` or at absl
  verbosity DEBUG)."""

  def __init__(self, verbose=False):
    super().__init__()
    self.verbose = verbose

  def filter(self, record):
    if record.levelno >= logging.WARNING or self.verbose:
      return True
    # absl's --verbosity=1 (-v 1) is parsed after this module loads, so it is read per record.
    if absl_logging.get_verbosity() >= absl_logging.DEBUG:
      return True
    return is_project_file(record.pathname)


@contextlib.contextmanager
def native_stderr_held_back(verbose=None):
  """Holds back what native code writes to file descriptor 2 inside the block, for libraries
  whose C++ loggers `TF_CPP_MIN_LOG_LEVEL` does not reach (the LiteRT converter's `Ignored
  output_format`, the interpreter's `Created TensorFlow Lite XNNPACK delegate`). The held lines
  are written out when the block raises, so a failure keeps its detail. `verbose` None: from
  `SQUAD_QA_VERBOSE`; true holds nothing back."""
  if verbose is None:
    verbose = verbose_from_environment()
  if verbose:
    yield
    return
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as held:
    os.dup2(held.fileno(), 2)
    try:
      yield
    except BaseException:
      os.dup2(saved, 2)
      held.seek(0)
      os.write(2, held.read())
      raise
    finally:
      os.dup2(saved, 2)
      os.close(saved)


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
