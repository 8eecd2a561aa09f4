"""squad_qa: fine-tune a BERT encoder on SQuAD with TensorFlow and serve it.

The clone's root folder is this package (setup.py maps it): `squad_qa.preprocess` reads SQuAD and
writes records, `squad_qa.model` builds the networks and reads checkpoints, `squad_qa.tasks` trains
and evaluates, `squad_qa.serving` exports; `squad_qa.train`, `squad_qa.export`, `squad_qa.ask` and
`squad_qa.preprocess.make_records` are the commands. docs/design.md draws the layers.
"""
