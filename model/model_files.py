"""The model group of settings: where the encoder comes from and where training writes."""

import dataclasses
from typing import Optional

from squad_qa.flags import settings


@dataclasses.dataclass(frozen=True, kw_only=True)
class EncoderFiles(settings.Settings):
  """Where the encoder comes from: train.py's, export.py's and model/convert_checkpoint.py's flags
  (`model.checkpoints` reads every kind of `init_checkpoint`)."""
  bert_config_file: Optional[str] = settings.setting(
      None, "BERT JSON config (google-research bert_config.json or an HF config.json). "
      "Default: the one beside --init_checkpoint.")
  init_checkpoint: Optional[str] = settings.setting(
      None, "Pretrained encoder to start from: an HF BERT folder (config.json, model.safetensors, "
      "vocab.txt), a google-research/bert TF1 checkpoint (folder or prefix, e.g. "
      "uncased_L-12_H-768_A-12/bert_model.ckpt), a tf-models-official TF2 encoder checkpoint, or "
      "a --model_dir of this tool. Without it: training starts the encoder from random weights, "
      "and export.py exports --model_dir's latest checkpoint.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelFiles(EncoderFiles):
  """Where the encoder comes from and where training writes: train.py's and export.py's flags."""
  model_dir: str = settings.setting("model_out", "Checkpoints, predictions and eval results.")
