"""preprocess/records.py: the training and eval pipelines' options (their batches: tests/commands,
tests/tasks)."""

from squad_qa.preprocess import records


def test_training_and_eval_batches_are_read_without_autotuning():
  """Autotuning made the end of a short eval pass, or dropping a training iterator, wait ~10 s at
  random (records._fixed_pipeline); every form of both pipelines turns it off. The files are not
  read to build a pipeline."""
  paths = ["never-read.tfrecord"]
  pipelines = [records.eval_dataset(paths, 64, 8, trim=trim) for trim in (True, False)]
  pipelines += [
      records.train_dataset(paths, 64, 8, seed=1, length_buckets=buckets, num_epochs=epochs)
      for buckets in (None, (16, 32)) for epochs in (None, 1)
  ]
  assert [p.options().autotune.enabled for p in pipelines] == [False] * 6
