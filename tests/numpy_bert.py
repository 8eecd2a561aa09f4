"""An independent NumPy forward pass of BERT, for checking checkpoint conversions.

Follows google-research/bert `modeling.py` (`BertModel`, `embedding_postprocessor`,
`attention_layer`, `transformer_model`) step by step, in float64, from weights under the original
google-research variable names. It shares no code with `model/`: a wrong name mapping, transposition
or head split in the converters shows up as a difference from this.
"""

import math

import numpy as np

LAYER_NORM_EPSILON = 1e-12  # tf.contrib.layers.layer_norm's default, used by modeling.py


def gelu_tanh(x):
  """modeling.py's `gelu`: the tanh approximation."""
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_erf(x):
  """The exact GELU, x * Phi(x): Hugging Face transformers' `gelu`."""
  return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def layer_norm(x, gamma, beta):
  mean = x.mean(-1, keepdims=True)
  variance = ((x - mean)**2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(variance + LAYER_NORM_EPSILON) * gamma + beta


def softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def bert_forward(params, input_ids, input_mask, token_type_ids, num_heads, exact_gelu=False):
  """BERT's outputs for a batch.

  Args:
    params: {google-research/bert variable name: array}, e.g. `bert/embeddings/word_embeddings`
      [vocab, hidden], `bert/encoder/layer_0/attention/self/query/kernel` [hidden, hidden].
    input_ids, input_mask, token_type_ids: int [batch, seq].
    num_heads: attention heads.
    exact_gelu: erf GELU (HF "gelu") instead of modeling.py's tanh approximation.

  Returns:
    (sequence_output float64 [batch, seq, hidden], pooled_output float64 [batch, hidden]).
  """
  p = {k: np.asarray(v, np.float64) for k, v in params.items()}
  gelu = gelu_erf if exact_gelu else gelu_tanh
  batch, seq = input_ids.shape
  x = (p["bert/embeddings/word_embeddings"][input_ids] +
       p["bert/embeddings/token_type_embeddings"][token_type_ids] +
       p["bert/embeddings/position_embeddings"][:seq][None])
  x = layer_norm(x, p["bert/embeddings/LayerNorm/gamma"], p["bert/embeddings/LayerNorm/beta"])
  hidden = x.shape[-1]
  size = hidden // num_heads
  # modeling.py: adder = (1 - mask) * -10000 on the attention scores.
  adder = (1.0 - input_mask[:, None, None, :].astype(np.float64)) * -10000.0
  layer = 0
  while f"bert/encoder/layer_{layer}/attention/self/query/kernel" in p:
    prefix = f"bert/encoder/layer_{layer}/"

    def dense(inputs, module, prefix=prefix):
      return inputs @ p[prefix + module + "/kernel"] + p[prefix + module + "/bias"]

    def heads(t):
      return t.reshape(batch, seq, num_heads, size).transpose(0, 2, 1, 3)

    q = heads(dense(x, "attention/self/query"))
    k = heads(dense(x, "attention/self/key"))
    v = heads(dense(x, "attention/self/value"))
    probs = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + adder)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
    x = layer_norm(
        dense(context, "attention/output/dense") + x,
        p[prefix + "attention/output/LayerNorm/gamma"],
        p[prefix + "attention/output/LayerNorm/beta"])
    intermediate = gelu(dense(x, "intermediate/dense"))
    x = layer_norm(
        dense(intermediate, "output/dense") + x, p[prefix + "output/LayerNorm/gamma"],
        p[prefix + "output/LayerNorm/beta"])
    layer += 1
  assert layer > 0, "no bert/encoder/layer_0 weights"
  pooled = np.tanh(x[:, 0] @ p["bert/pooler/dense/kernel"] + p["bert/pooler/dense/bias"])
  return x, pooled


def squad_logits(params, sequence_output):
  """run_squad.py's `create_model` head: (start_logits, end_logits), each [batch, seq]."""
  weights = np.asarray(params["cls/squad/output_weights"], np.float64)  # [2, hidden]
  bias = np.asarray(params["cls/squad/output_bias"], np.float64)
  logits = sequence_output @ weights.T + bias
  return logits[..., 0], logits[..., 1]


def random_bert_params(config, seed=0, squad_head=False, pretraining_heads=False):
  """Random weights under the original google-research/bert names, float32.

  Scales are larger than BERT's initializer (stddev 0.02) so attention is far from uniform and every
  weight moves the output: a wrongly mapped or transposed tensor cannot hide.

  Args:
    config: dict with google-research bert_config.json keys.
    squad_head: add run_squad.py's `cls/squad/output_weights` [2, hidden] and `output_bias` [2].
    pretraining_heads: add run_pretraining.py's `cls/predictions/*` and `cls/seq_relationship/*`.
  """
  rng = np.random.default_rng(seed)
  h, i = config["hidden_size"], config["intermediate_size"]

  def normal(*shape, scale=0.2):
    return (rng.standard_normal(shape) * scale).astype(np.float32)

  params = {
      "bert/embeddings/word_embeddings": normal(config["vocab_size"], h, scale=1.0),
      "bert/embeddings/token_type_embeddings": normal(config["type_vocab_size"], h, scale=1.0),
      "bert/embeddings/position_embeddings": normal(config["max_position_embeddings"], h,
                                                    scale=1.0),
      "bert/embeddings/LayerNorm/gamma": 1.0 + normal(h, scale=0.1),
      "bert/embeddings/LayerNorm/beta": normal(h, scale=0.1),
  }
  for layer in range(config["num_hidden_layers"]):
    prefix = f"bert/encoder/layer_{layer}/"
    for module, (n_in, n_out) in (("attention/self/query", (h, h)), ("attention/self/key", (h, h)),
                                  ("attention/self/value", (h, h)), ("attention/output/dense", (h,
                                                                                                h)),
                                  ("intermediate/dense", (h, i)), ("output/dense", (i, h))):
      params[prefix + module + "/kernel"] = normal(n_in, n_out, scale=1.0 / math.sqrt(n_in) * 1.5)
      params[prefix + module + "/bias"] = normal(n_out, scale=0.1)
    for module in ("attention/output/LayerNorm", "output/LayerNorm"):
      params[prefix + module + "/gamma"] = 1.0 + normal(h, scale=0.1)
      params[prefix + module + "/beta"] = normal(h, scale=0.1)
  params["bert/pooler/dense/kernel"] = normal(h, h, scale=1.0 / math.sqrt(h))
  params["bert/pooler/dense/bias"] = normal(h, scale=0.1)
  if squad_head:
    params["cls/squad/output_weights"] = normal(2, h, scale=0.5)
    params["cls/squad/output_bias"] = np.array([0.3, -0.2], np.float32)
  if pretraining_heads:
    params["cls/predictions/transform/dense/kernel"] = normal(h, h)
    params["cls/predictions/transform/dense/bias"] = normal(h)
    params["cls/predictions/transform/LayerNorm/gamma"] = 1.0 + normal(h, scale=0.1)
    params["cls/predictions/transform/LayerNorm/beta"] = normal(h)
    params["cls/predictions/output_bias"] = normal(config["vocab_size"])
    params["cls/seq_relationship/output_weights"] = normal(2, h)
    params["cls/seq_relationship/output_bias"] = normal(2)
  return params
