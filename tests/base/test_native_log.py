"""base/native_log.py: native stderr held back, written out when the block fails."""

import os

import pytest

from squad_qa.base import native_log


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
