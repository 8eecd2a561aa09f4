"""make_records.py's settings as one frozen config, without TensorFlow (its flags parse first)."""

import dataclasses
import os

from squad_qa import errors
from squad_qa.flags import settings
from squad_qa.preprocess import features
from squad_qa.preprocess import squad_reader


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordsConfig(features.Featurization, squad_reader.SquadFiles):
  """What `preprocess.make_records_job.make_records` makes: the flags of
  preprocess/make_records.py (each field is its flag).

  train_file, predict_file: None skips that split; both None: both from $SQUAD_DIR.

  Raises (on construction):
    errors.UsageError: no vocab_file, or lengths that leave no window (doc_stride, max_query_length
      or num_shards <= 0, or max_seq_length <= max_query_length + 3).
    errors.MissingFileError: vocab_file does not exist.
  """
  version_2_with_negative: bool = settings.variant(squad_reader.SquadVersion,
                                                   "version_2_with_negative")
  output_dir: str = settings.setting("records", "Where the TFRecord shards and meta.json go.")
  num_shards: int = settings.setting(8, "Shards per split (train and eval each).")
  num_workers: int = settings.setting(
      min(2,
          os.cpu_count() or 1),
      "Processes featurizing and writing shards (each takes a group of shards); 1 = in-process.",
      check=settings.at_least(1))

  def check(self):
    if not self.vocab_file:
      raise errors.UsageError(
          "--vocab_file is required (the encoder's vocab.txt, e.g. beside its checkpoint)")
    if not os.path.exists(self.vocab_file):
      raise errors.MissingFileError(f"--vocab_file={self.vocab_file}: no such file")
    if self.doc_stride <= 0 or self.max_query_length <= 0 or self.num_shards <= 0 or (
        self.max_seq_length <= self.max_query_length + 3):
      raise errors.UsageError(
          f"need doc_stride > 0, max_query_length > 0, num_shards > 0 and max_seq_length > "
          f"max_query_length + 3 (got doc_stride={self.doc_stride}, max_query_length="
          f"{self.max_query_length}, num_shards={self.num_shards}, max_seq_length="
          f"{self.max_seq_length})")
