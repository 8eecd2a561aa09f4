"""benchmarks/gpu_check.py: the no-GPU line, its table and the losses it reads from TensorBoard."""

import re

import pytest
import tensorflow as tf

from benchmarks import gpu_check
from tests import testutil

# TensorFlow's C++ log lines ("YYYY-MM-DD hh:mm:ss.ffffff: E external/...cuda_platform.cc:51] failed
# call to cuInit ..."): on a machine with CUDA libraries and no usable GPU TensorFlow logs such an
# error itself, whatever the script prints.
TF_CPP_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] ")


@pytest.mark.slow
@pytest.mark.skipif(bool(tf.config.list_physical_devices("GPU")), reason="a GPU is visible")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_0():
  status, output = testutil.run_cli("-m benchmarks.gpu_check")
  assert status == 0
  lines = [line for line in output.splitlines() if line.strip() and not TF_CPP_LOG_LINE.match(line)]
  assert lines == [gpu_check.NO_GPU_LINE], output


def test_the_table_has_one_row_per_check_and_lists_the_failures():
  table = gpu_check.Table()
  table.add("train xla on", "loss 5.900 -> 4.100", "steps 75 -> 300", True)
  table.add("memory b=8", "peak 900 MiB, planner 800 MiB", "measured/planned 1.13", False)
  assert table.render().splitlines() == [
      "check         result                         figure                 pass/fail",
      "train xla on  loss 5.900 -> 4.100            steps 75 -> 300        pass",
      "memory b=8    peak 900 MiB, planner 800 MiB  measured/planned 1.13  FAIL"
  ]
  assert table.failed == ["memory b=8"]
  assert gpu_check.finish(table, 0) == 1


def test_recorded_losses_are_read_per_step_in_order(tmp_path):
  writer = tf.summary.create_file_writer(str(tmp_path / "train"))
  with writer.as_default():
    for step, loss in ((20, 4.5), (10, 5.25), (30, 3.0)):
      tf.summary.scalar("loss", loss, step=step)
      tf.summary.scalar("learning_rate", 1e-5, step=step)
  writer.close()
  assert gpu_check.recorded_losses(str(tmp_path)) == [(10, 5.25), (20, 4.5), (30, 3.0)]
  assert gpu_check.recorded_losses(str(tmp_path / "missing")) == []
