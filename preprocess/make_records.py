r"""SQuAD JSON -> sharded TFRecords of windowed WordPiece features, plus meta.json.

  python preprocess/make_records.py --vocab_file=vocab.txt --max_seq_length=384 \
      --output_dir=records [--train_file=...] [--predict_file=...] [--version_2_with_negative]

Without --train_file/--predict_file both splits are made from $SQUAD_DIR (default data/squad). The
features are those of google-research/bert run_squad.py / tf-models-official squad_lib.py. Shards
appear only when complete and meta.json last; an error a user can fix ends the command with one
line `make_records.py: <message>` and exit status 1.
"""

from squad_qa.base import console  # noqa: F401  (must precede tensorflow)

from squad_qa.flags import command_line
from squad_qa.flags import settings
from squad_qa.preprocess import records_config

settings.define_flags(records_config.RecordsConfig)


def main(argv):
  """Runs the job of the flags' RecordsConfig (workers fork before TensorFlow has run)."""
  del argv
  config = command_line.config_from_flags(records_config.RecordsConfig)
  # Imported after the flags parse, so --help and flag errors do not wait for TensorFlow.
  from squad_qa.preprocess import make_records_job  # pylint: disable=g-import-not-at-top
  make_records_job.make_records(config)


def cli():
  """Console-script entry point: parses the flags and runs main()."""
  command_line.run(main)


if __name__ == "__main__":
  cli()
