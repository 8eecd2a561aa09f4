r"""Peak training memory of the BERT span model, and the largest batch that fits a device.

    python -m model.memory --bert_config_file=bert_config.json --max_seq_length=384 \
        --train_batch_size=12 --gpu --mixed_precision_dtype=float32 --device_memory_gb=12
    python -m model.memory --gpu --device_memory_gb=16   # BERT-Base/Large table, seq 64...512
    python -m model.memory    # the same for what train.py without --gpu trains on here

--device_memory_gb is a GPU's capacity with --gpu (or where TensorFlow sees a GPU), else the RAM.
"""

from squad_qa.base import console  # noqa: F401  (must precede tensorflow)

from squad_qa.flags import command_line
from squad_qa.flags import settings
from squad_qa.model.memory import plan


def main(argv):
  """`python -m model.memory`: a breakdown for one configuration, or the max-batch table."""
  del argv
  print(plan.report(command_line.config_from_flags(plan.PlannerConfig)))


def cli():
  """Console-script entry point: defines and parses the planner's flags and runs main()."""
  settings.define_flags(plan.PlannerConfig)
  command_line.run(main)


if __name__ == "__main__":
  cli()
