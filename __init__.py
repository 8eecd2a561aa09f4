"""squad_qa: fine-tune a BERT encoder on SQuAD with TensorFlow and serve it (docs/design.md)."""
