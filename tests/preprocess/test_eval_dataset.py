"""preprocess/records.eval_dataset: the pipeline's options (its batches: tests/commands)."""

from squad_qa.preprocess import records


def test_eval_batches_are_read_without_autotuning():
  """Autotuning made the end of a short eval pass wait ~10 s at random (records._fixed_pipeline);
  both forms of the eval pipeline turn it off. The files are not read to build the pipeline."""
  for trim in (True, False):
    dataset = records.eval_dataset(["never-read.tfrecord"], 64, 8, trim=trim)
    assert dataset.options().autotune.enabled is False
