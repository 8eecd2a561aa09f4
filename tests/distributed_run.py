"""A training run of the QA task for the distribution tests, in its own process.

TensorFlow must be told how to split the CPU into logical devices, and which cluster it is in
(TF_CONFIG), before it initializes, so each configuration runs in a fresh process started by
tests/tasks/test_distribution.py. Uses the task's Python API (no flags): tasks.distribution,
tasks.question_answering, tasks.trainer.

  python tests/distributed_run.py --strategy=mirrored --num_cpu_devices=2 --records_dir=R \
      --config=tiny.json --model_dir=M --run=NAME:steps=6,stop_at=3,accumulation=2

Each --run=NAME:key=value,... trains in --model_dir/NAME and prints `RESULT NAME {json}`. Keys:
steps (the schedule), stop_at (train to this step, then stop: a later run with the same NAME
resumes), batch (global), accumulation, dtype (float32, float16, bfloat16), buckets (1: the
default length buckets, 0: padded to max_seq_length), loop (steps per orbit loop), seed (input
order), config (a key of --config: a second config is given as --config=NAME=path).
"""

import argparse
import json
import os

from squad_qa.tasks import distribution  # pylint: disable=g-import-not-at-top


def parse():
  parser = argparse.ArgumentParser()
  parser.add_argument("--strategy", default="one_device")
  parser.add_argument("--num_cpu_devices", type=int, default=1)
  parser.add_argument("--records_dir", required=True)
  parser.add_argument("--config", action="append", required=True,
                      help="path (the default config) or NAME=path")
  parser.add_argument("--model_dir", required=True)
  parser.add_argument(
      "--run", action="append", default=[],
      help="NAME:steps=6,stop_at=3,batch=8,accumulation=1,dtype=float32,buckets=1,"
      "loop=3,seed=5,save_every=3,config=default")
  return parser.parse_args()


def run_one(strategy, args, name, settings):
  import tf_keras  # pylint: disable=g-import-not-at-top
  from squad_qa.model import bert_config as bert_config_lib  # pylint: disable=g-import-not-at-top
  from squad_qa.preprocess import records  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import model_dir as model_dir_lib  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import question_answering as qa  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import run_plan  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import train_config  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import trainer as trainer_lib  # pylint: disable=g-import-not-at-top

  steps = int(settings.get("steps", 6))
  stop_at = int(settings.get("stop_at", steps))
  batch = int(settings.get("batch", 8))
  accumulation = int(settings.get("accumulation", 1))
  dtype = settings.get("dtype", "float32")
  save_every = int(settings.get("save_every", 3))
  configs = dict(c.split("=", 1) if "=" in c else ("default", c) for c in args.config)
  replicas = strategy.num_replicas_in_sync
  qa.set_precision_policy(dtype)
  tf_keras.utils.set_random_seed(11)
  meta = records.read_meta(args.records_dir)
  max_seq_length = meta["flags"]["max_seq_length"]
  config = qa.QATaskConfig(
      bert_config=bert_config_lib.BertConfig.from_json_file(configs[settings.get(
          "config", "default")]),
      max_seq_length=max_seq_length,
      train_files=tuple(records.shard_paths(args.records_dir, meta, records.TRAIN_SPLIT)),
      per_replica_batch_size=batch // replicas // accumulation,
      accumulation_steps=accumulation,
      learning_rate=1e-3,
      num_train_steps=steps,
      warmup_proportion=0.0,
      mixed_precision_dtype=dtype,
      seed=int(settings.get("seed", 5)),
      # XLA where train.py turns it on without --gpu (bfloat16 on a CPU without bfloat16 matmuls).
      jit_compile=train_config.TrainConfig(mixed_precision_dtype=dtype).use_xla,
      length_buckets=(records.length_bucket_boundaries(max_seq_length) if int(
          settings.get("buckets", 1)) else None))
  task = qa.QuestionAnsweringTask(config)
  with strategy.scope():
    model = task.build_model()
    optimizer = task.create_optimizer()
    checkpoint = model_dir_lib.make_checkpoint(model, optimizer)
  trainer = trainer_lib.QATrainer(strategy, task.replica_step(model, optimizer), optimizer, batch)
  plan = run_plan.RunPlan(model_dir=os.path.join(args.model_dir, name), num_train_steps=stop_at,
                          save_checkpoints_steps=save_every,
                          steps_per_loop=int(settings.get("loop", 3)))
  result = trainer_lib.train(trainer, checkpoint, task.build_inputs, plan)
  print(f"RESULT {name} {json.dumps(result)}", flush=True)


def main():
  args = parse()
  strategy = distribution.make_strategy(args.strategy, num_gpus=0,
                                        num_cpu_devices=args.num_cpu_devices)
  for spec in args.run:
    name, _, rest = spec.partition(":")
    settings = dict(item.split("=") for item in rest.split(",") if item)
    run_one(strategy, args, name, settings)


if __name__ == "__main__":
  main()
