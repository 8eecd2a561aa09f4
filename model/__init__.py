"""BERT encoder + span head (tf-models-official), configs and checkpoint loading."""
