"""The SQuAD task: training (question_answering), evaluation, and the files of a --model_dir."""
