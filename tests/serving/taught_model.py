"""The tiny model the serving tests share: trained on a few passages of our own, then exported."""

import tensorflow as tf
import tf_keras

from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import span_model
from squad_qa.preprocess import answer_spans
from squad_qa.preprocess import features as features_lib
from squad_qa.preprocess import squad_reader
from squad_qa.preprocess import wordpiece
from squad_qa.serving import export_model
from squad_qa.serving import module as serving_module
from squad_qa.serving import saved_model_qa
from squad_qa.tasks import question_answering
from tests import testutil

SEQ, STRIDE, QUERY = 128, 64, 32

# Our own short passages (not SQuAD). The tiny model is trained on them until it answers them, so
# the saved_model_cli test has a right answer to expect.
TAUGHT = [
    ("When was the bridge painted?",
     "The harbour bridge was painted red in 1932 by a crew of forty workers.", "1932"),
    ("Who repaired the clock tower?",
     "In the spring the old clock tower was repaired by Marta Olsen and her two apprentices.",
     "Marta Olsen"),
    ("What colour is the ferry?",
     "Every morning a yellow ferry crosses the bay with fishermen and tourists.", "yellow"),
    ("How many lighthouses stand on the coast?",
     "Seven lighthouses stand on the northern coast, the oldest built of granite.", "Seven"),
]


def _answer_span(tokenizer, context, answer):
  start = context.index(answer)
  context_tokens = tokenizer.tokenize([context])[0]
  words = squad_reader.char_to_word_offsets(context)[1]
  return answer_spans.answer_token_span(context_tokens, words, start, answer,
                                        tokenizer.tokenize([answer])[0].ids)


def train_on_taught(model, tokenizer, steps=150):
  """Fits the TAUGHT questions (full batch, Adam); returns the final loss."""
  batch = []
  for question, context, answer in TAUGHT:
    query, passage = tokenizer.tokenize([question, context])
    batch += features_lib.make_features(
        0, 0, query.ids, passage, tokenizer.cls_id, tokenizer.sep_id,
        features_lib.Featurization(max_seq_length=SEQ, doc_stride=STRIDE, max_query_length=QUERY),
        _answer_span(tokenizer, context, answer))
  inputs = {
      span_model.INPUT_WORD_IDS: tf.constant([f.input_ids for f in batch]),
      span_model.INPUT_MASK: tf.constant([f.input_mask for f in batch]),
      span_model.INPUT_TYPE_IDS: tf.constant([f.segment_ids for f in batch])
  }
  starts = tf.constant([f.start_position for f in batch])
  ends = tf.constant([f.end_position for f in batch])
  optimizer = tf_keras.optimizers.Adam(3e-3)

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      start_logits, end_logits = model(inputs, training=True)
      loss = question_answering.span_loss(starts, ends, start_logits, end_logits)
    variables = question_answering.trained_variables(model)
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss

  for _ in range(steps):
    loss = float(step())
  return loss


def export_taught_model(tmp):
  """A tiny model taught TAUGHT, exported with all signatures under folder `tmp`, and loaded back.

  Returns:
    dict: export_dir, model, tokenizer (Python WordPiece), loss (final training loss), qa_config,
    qa (a SavedModelQA of the export), module (a QAServingModule of the model, not exported).
  """
  tf_keras.utils.set_random_seed(1)
  config = bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG)
  model, _ = span_model.build_span_model(config)
  tokenizer = wordpiece.WordPieceTokenizer(testutil.vocab_file())
  loss = train_on_taught(model, tokenizer)
  qa_config = dict(max_seq_length=SEQ, doc_stride=STRIDE, max_query_length=QUERY,
                   do_lower_case=True, **serving_module.DECODING_DEFAULTS)
  export_dir = str(tmp / "export")
  export_model.write_saved_model(model, testutil.vocab_file(), qa_config, export_dir)
  return {
      "export_dir": export_dir,
      "model": model,
      "tokenizer": tokenizer,
      "loss": loss,
      "qa_config": qa_config,
      "qa": saved_model_qa.SavedModelQA(export_dir),
      "module": serving_module.QAServingModule(model, testutil.vocab_file(), qa_config)
  }
