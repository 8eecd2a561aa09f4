"""A training run of the QA task for the distribution tests, in its own process.

TensorFlow must be told how to split the CPU into logical devices, and which cluster it is in
(TF_CONFIG), before it initializes, so each configuration runs in a fresh process started by
tests/test_distribution.py. Uses the task's Python API (no flags): tasks.distribution,
tasks.question_answering, tasks.trainer.

  python tests/distributed_run.py --strategy=mirrored --num_cpu_devices=2 --records_dir=R \
      --config=tiny.json --model_dir=M --steps=6 --stop_at=3 --batch=8 [--accumulation=2] [--mixed]

--data=zip2 feeds one device the global batches that 2 workers of multi_worker_mirrored see (each
worker's pipeline reads its own shard; a global batch is worker 0's batch then worker 1's).
Several runs may be given as --run=NAME:key=value,... ; each trains in --model_dir/NAME.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tasks import distribution  # pylint: disable=g-import-not-at-top


def parse():
  parser = argparse.ArgumentParser()
  parser.add_argument("--strategy", default="one_device")
  parser.add_argument("--num_cpu_devices", type=int, default=1)
  parser.add_argument("--records_dir", required=True)
  parser.add_argument("--config", required=True)
  parser.add_argument("--model_dir", required=True)
  parser.add_argument("--run", action="append", default=[],
                      help="NAME:steps=6,stop_at=3,batch=8,accumulation=1,mixed=0,data=pipelines,"
                           "save_every=3")
  return parser.parse_args()


def run_one(strategy, args, name, settings):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from model import bert_config as bert_config_lib  # pylint: disable=g-import-not-at-top
  from preprocess import records  # pylint: disable=g-import-not-at-top
  from tasks import question_answering as qa  # pylint: disable=g-import-not-at-top
  from tasks import trainer as trainer_lib  # pylint: disable=g-import-not-at-top

  steps = int(settings.get("steps", 6))
  stop_at = int(settings.get("stop_at", steps))
  batch = int(settings.get("batch", 8))
  accumulation = int(settings.get("accumulation", 1))
  mixed = bool(int(settings.get("mixed", 0)))
  save_every = int(settings.get("save_every", 3))
  replicas = strategy.num_replicas_in_sync
  qa.set_precision_policy("float16" if mixed else "float32")
  tf_keras.utils.set_random_seed(11)
  meta = records.read_meta(args.records_dir)
  config = qa.QATaskConfig(
      bert_config=bert_config_lib.BertConfig.from_json_file(args.config),
      max_seq_length=meta["flags"]["max_seq_length"],
      train_files=tuple(records.shard_paths(args.records_dir, meta, records.TRAIN_SPLIT)),
      per_replica_batch_size=batch // replicas, accumulation_steps=accumulation,
      learning_rate=1e-3, num_train_steps=steps, warmup_proportion=0.0,
      mixed_precision_dtype="float16" if mixed else "float32", seed=5)
  task = qa.QuestionAnsweringTask(config)
  dataset_fn = task.build_inputs
  if settings.get("data") == "zip2":  # what 2 workers of batch // 2 each see, as one batch
    worker_task = qa.QuestionAnsweringTask(
        qa.QATaskConfig(**dict(vars(config), per_replica_batch_size=batch // 2)))

    def dataset_fn(context, skip):
      del context
      parts = [worker_task.build_inputs(tf.distribute.InputContext(2, i, 2), skip)
               for i in range(2)]
      return tf.data.Dataset.zip(tuple(parts)).map(
          lambda a, b: {k: tf.concat([a[k], b[k]], 0) for k in a})
  with strategy.scope():
    model = task.build_model()
    optimizer = task.create_optimizer()
    checkpoint = trainer_lib.make_checkpoint(model, optimizer, steps)
  trainer = trainer_lib.QATrainer(strategy, task.replica_step(model, optimizer), optimizer,
                                  batch * accumulation)
  model_dir = os.path.join(args.model_dir, name)
  result = trainer_lib.train(strategy, trainer, checkpoint, model_dir, stop_at, dataset_fn,
                             save_every, 1, distribution.is_chief(strategy),
                             getattr(strategy, "cluster_resolver", None))
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
