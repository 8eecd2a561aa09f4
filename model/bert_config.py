"""BERT hyperparameters from a google-research/bert `bert_config.json` or Hugging Face
`config.json` (both use `modeling.BertConfig`'s keys). No TensorFlow at import, for the memory
planner."""

import dataclasses
import json
import os

from squad_qa import errors

_REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
             "intermediate_size")
# Keys whose value is a count (at least 1), and probabilities in [0, 1).
_COUNTS = _REQUIRED + ("max_position_embeddings", "type_vocab_size")
_PROBABILITIES = ("hidden_dropout_prob", "attention_probs_dropout_prob")
# hidden_act values the encoder builds: tf_keras's activation names (tf_keras.activations.get) and
# Hugging Face's "gelu_new" (the tanh form).
ACTIVATIONS = ("gelu", "gelu_new", "relu", "tanh", "swish", "silu", "sigmoid", "elu", "selu",
               "mish", "linear")


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """Shape and regularization of a BERT encoder. Sizes are counts (tokens, units, layers)."""
  vocab_size: int
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu"
  hidden_dropout_prob: float = 0.1
  attention_probs_dropout_prob: float = 0.1
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  initializer_range: float = 0.02
  # "gelu" means the tanh approximation in google-research/bert modeling.py (and in tfm's converter)
  # but the exact erf form in Hugging Face transformers ("gelu_new" is their tanh form).
  exact_gelu: bool = False

  @classmethod
  def from_dict(cls, values, source="config"):
    """A config from a dict of the google-research/HF keys (others ignored).

    Raises:
      errors.UsageError: a required key is missing, or a value no encoder can have (a count that
        is not a whole number of at least 1, hidden_size not a multiple of num_attention_heads, a
        dropout probability outside [0, 1), an unknown hidden_act); one line naming `source`.
    """
    missing = [k for k in _REQUIRED if k not in values]
    if missing:
      raise errors.UsageError(f"{source}: not a BERT config, missing {', '.join(missing)}")
    _check_values(values, source)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: v for k, v in values.items() if k in names}
    is_hf = "model_type" in values or "architectures" in values
    kwargs["exact_gelu"] = is_hf and values.get("hidden_act", "gelu") == "gelu"
    if kwargs.get("hidden_act") == "gelu_new":
      kwargs["hidden_act"] = "gelu"
    return cls(**kwargs)

  @classmethod
  def from_json_file(cls, path):
    """Reads a JSON config file.

    Raises:
      FileNotFoundError, ValueError: with the path in the message.
    """
    exists, open_file = _file_functions(path)
    if not exists(path):
      raise errors.MissingFileError(f"{path}: BERT config not found (--bert_config_file)")
    if os.path.isdir(path):
      inside = [n for n in CONFIG_FILE_NAMES if os.path.isfile(os.path.join(path, n))]
      hint = (f"--bert_config_file={os.path.join(path, inside[0])}"
              if inside else "the config's JSON file")
      raise errors.UsageError(f"--bert_config_file={path} is a folder; pass {hint}")
    with open_file(path) as f:
      try:
        values = json.load(f)
      except json.JSONDecodeError as e:
        raise errors.UsageError(f"{path}: not JSON ({e})") from None
    return cls.from_dict(values, source=path)

  def to_dict(self):
    return dataclasses.asdict(self)


def _check_values(values, source):
  """Raises errors.UsageError (one line naming `source` and the key) for a value of `values` no
  encoder can have; see `BertConfig.from_dict`."""

  def refuse(key, what):
    raise errors.UsageError(f"{source}: {key}={json.dumps(values[key])} {what}; correct it in the "
                            f"config file")

  def check(key, default, kinds, valid, what):
    value = values.get(key, default)
    # JSON's true and false are ints to Python, not numbers to a config.
    if isinstance(value, bool) or not isinstance(value, kinds) or not valid(value):
      refuse(key, what)

  for key in _COUNTS:
    check(key, 1, int, lambda v: v >= 1, "must be a whole number of at least 1")
  for key in _PROBABILITIES:
    check(key, 0.0, (int, float), lambda v: 0 <= v < 1,
          "must be a probability from 0 up to (not including) 1")
  check("initializer_range", 0.02, (int, float), lambda v: v > 0,
        "must be a number above 0 (the weights' initial standard deviation)")
  if values["hidden_size"] % values["num_attention_heads"]:
    refuse(
        "hidden_size", f"is not a multiple of num_attention_heads="
        f"{values['num_attention_heads']} (each head takes an equal share)")
  if values.get("hidden_act", "gelu") not in ACTIVATIONS:
    refuse("hidden_act", f"is not one of {', '.join(ACTIVATIONS)}")


# A BERT config's name beside its checkpoint: google-research/bert's, and Hugging Face's.
GOOGLE_CONFIG_FILE, HF_CONFIG_FILE = CONFIG_FILE_NAMES = ("bert_config.json", "config.json")


def _file_functions(path):
  """(exists, open for reading) for `path`: tf.io.gfile's for a URL, Python's for a local file."""
  if "://" in str(path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.io.gfile.exists, lambda p: tf.io.gfile.GFile(p, "r")
  return os.path.exists, lambda p: open(p, encoding="utf-8")  # pylint: disable=consider-using-with
