"""The tf.distribute strategy from tfm's flags (built by tfm's `get_distribution_strategy`;
multi-worker membership from `TF_CONFIG`), the chief, and the training input for the strategy
(splitting the global batch: `model.memory.plan.per_replica_batches`).
`--num_cpu_devices=N` splits the CPU into N logical devices for `mirrored`: a multi-GPU run's
arithmetic without GPUs.
"""

import contextlib
import json
import os

from absl import logging
import tensorflow as tf
from official.common import distribute_utils

from squad_qa import errors
from squad_qa.flags import command_line

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")


class DistributionError(errors.UserError, ValueError):
  """A strategy that cannot be built as asked (one-line message)."""


def split_cpu(num_cpu_devices):
  """Splits the first physical CPU into `num_cpu_devices` logical devices (before TF initializes).

  Raises:
    DistributionError: TensorFlow is already initialized with another split.
  """
  if num_cpu_devices <= 1:
    return
  cpu = tf.config.list_physical_devices("CPU")[0]
  try:
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] *
                                               num_cpu_devices)
  except RuntimeError as e:
    if len(tf.config.list_logical_devices("CPU")) != num_cpu_devices:
      raise DistributionError(f"--num_cpu_devices={num_cpu_devices}: {e}") from None


def make_strategy(distribution_strategy=None, num_gpus=None, all_reduce_alg=None, tpu=None,
                  num_cpu_devices=1):
  """The strategy the flags ask for.

  Args:
    distribution_strategy: one of STRATEGIES, or None: `mirrored` with several GPUs, else
      `one_device`.
    num_gpus: GPUs to use; None: every visible GPU.
    all_reduce_alg: tfm's (e.g. "nccl", "ring"); None: TensorFlow's choice.
    tpu: the TPU's address (grpc://... or a Cloud TPU name) for "tpu".
    num_cpu_devices: logical CPU devices for `mirrored` when there is no GPU.

  Returns:
    A tf.distribute.Strategy.

  Raises:
    DistributionError: an unknown name or an impossible combination, e.g. --tpu,
      --all_reduce_alg or --num_cpu_devices with a strategy that does not use it, or a $TF_CONFIG
      that is not JSON (one line).
  """
  tf_config = _tf_config()  # TensorFlow's resolver reads it under every strategy
  if num_cpu_devices > 1 and distribution_strategy != "mirrored":
    raise DistributionError(
        f"--num_cpu_devices={num_cpu_devices} applies to --distribution_strategy=mirrored, and "
        f"this run is {distribution_strategy or 'one_device or mirrored over GPUs (the default)'}"
        f": add --distribution_strategy=mirrored or drop it")
  if num_cpu_devices > 1 and all_reduce_alg:
    raise DistributionError(
        f"--all_reduce_alg={all_reduce_alg} chooses how GPUs or workers reduce, and this run's "
        f"{num_cpu_devices} logical CPU devices reduce in host memory: drop it")
  split_cpu(num_cpu_devices)
  visible = len(tf.config.list_physical_devices("GPU"))
  if num_gpus is None:
    num_gpus = visible
  if distribution_strategy is None:
    distribution_strategy = "mirrored" if num_gpus > 1 else "one_device"
  if distribution_strategy not in STRATEGIES:
    raise DistributionError(f"--distribution_strategy={distribution_strategy}: expected one of "
                            f"{', '.join(STRATEGIES)}")
  if num_gpus > visible:
    raise DistributionError(f"--num_gpus={num_gpus} but TensorFlow sees {visible} GPUs")
  if distribution_strategy == "tpu" and not tpu:
    raise DistributionError("--distribution_strategy=tpu needs --tpu (the TPU's address or name)")
  if tpu and distribution_strategy != "tpu":
    raise DistributionError(f"--tpu={tpu} applies to --distribution_strategy=tpu, and this run is "
                            f"{distribution_strategy}: add that strategy or drop --tpu")
  if all_reduce_alg and distribution_strategy not in ("mirrored", "multi_worker_mirrored"):
    raise DistributionError(f"--all_reduce_alg={all_reduce_alg} applies to the mirrored and "
                            f"multi_worker_mirrored strategies, and this run is "
                            f"{distribution_strategy}: drop it")
  if distribution_strategy == "mirrored" and not num_gpus and num_cpu_devices > 1:
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(devices)
  waiting = (_waiting_for_workers(tf_config)
             if distribution_strategy == "multi_worker_mirrored" else None)
  try:
    if waiting:
      # TensorFlow waits holding Python's lock, and its preemption notifier takes SIGTERM from
      # the start of the wait until training: only Ctrl-C (or SIGKILL) can end the wait.
      logging.info(
          "multi_worker_mirrored: %s, without a timeout (each starts with the same command and "
          "its own TF_CONFIG task); meanwhile Ctrl-C ends this process at once (status 130, "
          "nothing is written yet), and TensorFlow holds a SIGTERM until the cluster is up",
          waiting)
    with command_line.signals_end_at_once() if waiting else contextlib.nullcontext():
      return distribute_utils.get_distribution_strategy(distribution_strategy=distribution_strategy,
                                                        num_gpus=num_gpus,
                                                        all_reduce_alg=all_reduce_alg,
                                                        tpu_address=tpu)
  except (ValueError, tf.errors.OpError) as e:  # e.g. NotFoundError: no TPU at --tpu
    message = (e.message if isinstance(e, tf.errors.OpError) else str(e)).strip().splitlines()
    raise DistributionError(f"--distribution_strategy={distribution_strategy}: "
                            f"{message[0] if message else type(e).__name__}") from None


def _tf_config():
  """$TF_CONFIG as a dict ({} when unset or empty).

  Raises:
    DistributionError: it is not a JSON object (one line; TensorFlow's resolver would raise the
      JSON error alone, with a traceback), or its task's index is not one of its cluster's tasks
      of that type.
  """
  text = os.environ.get("TF_CONFIG", "")
  try:
    tf_config = json.loads(text) if text.strip() else {}
  except json.JSONDecodeError as e:
    raise DistributionError(
        f"$TF_CONFIG is not valid JSON ({e}); set it to the cluster and this task, e.g. "
        f"'{{\"cluster\": {{\"worker\": [\"host1:port\", \"host2:port\"]}}, \"task\": "
        f"{{\"type\": \"worker\", \"index\": 0}}}}', or unset it") from None
  if not isinstance(tf_config, dict):
    raise DistributionError(f"$TF_CONFIG is not a JSON object: {text[:80]}")
  task, cluster = tf_config.get("task") or {}, tf_config.get("cluster") or {}
  tasks = cluster.get(task.get("type")) if isinstance(cluster, dict) else None
  index = task.get("index", 0)
  if isinstance(tasks, list) and not (isinstance(index, int) and 0 <= index < len(tasks)):
    raise DistributionError(
        f"$TF_CONFIG's task is {task['type']} {json.dumps(index)}, but its cluster has "
        f"{len(tasks)} {task['type']} task{'s' if len(tasks) != 1 else ''} (index 0 to "
        f"{len(tasks) - 1}): give this process's index among them")
  return tf_config


def _waiting_for_workers(tf_config):
  """What a multi-worker strategy waits for at its start, from $TF_CONFIG (`tf_config`, a dict):
  e.g. "waiting for the other 2 tasks of TF_CONFIG's cluster to connect (worker 1 at host:port,
  ...)"; None without other tasks."""
  cluster, task = tf_config.get("cluster") or {}, tf_config.get("task") or {}
  others = [
      f"{kind} {i} at {address}" for kind, addresses in sorted(cluster.items())
      if isinstance(addresses, list) for i, address in enumerate(addresses)
      if (kind, i) != (task.get("type"), task.get("index"))
  ]
  if not others:
    return None
  shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
  return (f"waiting for the other {len(others)} task{'s' if len(others) > 1 else ''} of "
          f"TF_CONFIG's cluster to connect ({shown})")


def is_chief(strategy):
  """Whether this worker writes --model_dir: the only worker, the "chief", or else worker 0."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.task_type:
    return True
  if resolver.task_type == "chief":
    return True
  return (resolver.task_type == "worker" and resolver.task_id == 0 and
          "chief" not in resolver.cluster_spec().as_dict())


def is_multi_worker(strategy):
  """Whether `strategy` spans several worker processes (a cluster of more than one task)."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.task_type:
    return False
  return sum(len(tasks) for tasks in resolver.cluster_spec().as_dict().values()) > 1


def distribute_inputs(strategy, dataset_fn):
  """The training input of `dataset_fn` (a `tf.distribute.InputContext` -> that pipeline's
  dataset) for `strategy`: under a `OneDeviceStrategy` the dataset of one pipeline of one
  replica itself, else `strategy.distribute_datasets_from_function(dataset_fn)`.

  Why not always the latter: its iterator feeds each device through TensorFlow's
  `MultiDeviceIterator`, whose device-side pipeline runs tf.data's autotuning on TensorFlow's
  default options (the records' pipeline turns it off, records.py); destroying that iterator then
  waits for the autotuning thread's next wake-up, up to 60 s (TF 2.20). A budgeted 16-minute run
  ended ~45 s after printing its last line. On one device there is nothing to distribute.
  """
  if isinstance(strategy, tf.distribute.OneDeviceStrategy):
    return dataset_fn(tf.distribute.InputContext())
  return strategy.distribute_datasets_from_function(dataset_fn)
