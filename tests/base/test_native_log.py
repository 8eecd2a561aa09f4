"""base/native_log.py: native stderr held back, written out when the block fails; absl's C++ log
level set from TensorFlow's."""

import os
import subprocess
import sys

import pytest

import squad_qa
from squad_qa.base import native_log

VERBOSE = squad_qa.VERBOSE_ENV


def test_native_stderr_is_held_back_unless_the_block_fails(capfd):
  with native_log.native_stderr_held_back(verbose=False):
    os.write(2, b"native chatter\n")
  assert capfd.readouterr().err == ""
  with pytest.raises(RuntimeError, match="failed"):
    with native_log.native_stderr_held_back(verbose=False):
      os.write(2, b"native detail\n")
      raise RuntimeError("failed")
  assert capfd.readouterr().err == "native detail\n"
  with native_log.native_stderr_held_back(verbose=True):
    os.write(2, b"kept when verbose\n")
  assert capfd.readouterr().err == "kept when verbose\n"
  os.write(2, b"after\n")  # the descriptor is restored
  assert capfd.readouterr().err == "after\n"


def test_the_cpp_log_level_reaches_absl_in_the_pinned_tensorflow():
  """The function is found in the TensorFlow that setup.py pins (else XLA's lines would show)."""
  import tensorflow  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  try:
    assert native_log.cpp_log_level_to_absl({"TF_CPP_MIN_LOG_LEVEL": "2"}) == 2
  finally:  # absl's own default, for the tests after this one
    assert native_log.cpp_log_level_to_absl({"TF_CPP_MIN_LOG_LEVEL": "0"}) == 0
  for unset in ({}, {"TF_CPP_MIN_LOG_LEVEL": "x"}, {"TF_CPP_MIN_LOG_LEVEL": "7"}):
    assert native_log.cpp_log_level_to_absl(unset) is None


# A command's start (the console, then TensorFlow), then an XLA-compiled function.
_XLA_RUN = """
import sys
from squad_qa.base import console
import tensorflow as tf
from squad_qa.base import native_log
if sys.argv[1] == "absl":
  native_log.cpp_log_level_to_absl()
print(float(tf.function(lambda x: tf.reduce_sum(x * 2.0), jit_compile=True)(tf.ones([3]))))
"""


@pytest.mark.slow  # two processes start TensorFlow
def test_xla_s_first_compilation_prints_nothing_at_the_console_s_level():
  env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", VERBOSE)}
  outputs = {
      mode: subprocess.run([sys.executable, "-c", _XLA_RUN, mode], capture_output=True, text=True,
                           env=env, timeout=300, check=True) for mode in ("absl", "as_before")
  }
  before = outputs["as_before"].stderr
  assert "Compiled cluster using XLA!" in before and "absl::InitializeLog()" in before
  assert outputs["absl"].stdout == "6.0\n" and outputs["absl"].stderr == ""
