#!/usr/bin/env bash
# Sets up the environment (see scripts/_venv.sh) and trains Rainbow with
# prioritized replay on CartPole-v1 (configs/rainbow_cartpole.gin, seeded):
# a few minutes on a 2-core CPU, to an evaluation return of 475+ (500 max).
#
#   bash scripts/train.sh                              # into runs/rainbow_cartpole
#   bash scripts/train.sh --base_dir=/tmp/my_run       # elsewhere
#   bash scripts/train.sh --gin_bindings='Runner.num_iterations = 5'
#
# Arguments go to `python -m dopamine_per.discrete_domains.train`. Run again
# with the same --base_dir and it resumes after the last complete iteration
# (a finished run has nothing left to do: remove the directory to start over).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/_venv.sh
source "$repo_root/scripts/_venv.sh"
dopamine_per_venv "fast,gym"

base_dir="$repo_root/runs/rainbow_cartpole"
for arg in "$@"; do
  case "$arg" in
    --base_dir=*) base_dir="${arg#--base_dir=}" ;;
  esac
done
if [[ -d "$base_dir/checkpoints" ]]; then
  echo "Resuming the run in $base_dir (remove it to start over)."
fi

cd "$repo_root"
# TensorFlow's C++ start-up messages would drown the progress line.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
start=$(date +%s)
"$PYTHON" -m dopamine_per.discrete_domains.train \
  --base_dir="$base_dir" \
  --gin_files=configs/rainbow_cartpole.gin \
  "$@"
elapsed=$(( $(date +%s) - start ))

"$PYTHON" - "$base_dir" "$elapsed" <<'PY'
import json
import os
import sys

base_dir, elapsed = sys.argv[1], int(sys.argv[2])
with open(os.path.join(base_dir, 'logs', 'statistics.jsonl')) as f:
  records = [json.loads(line) for line in f if line.strip()]
print()
if records:
  last = records[-1]
  evals = [r['eval_average_return'] for r in records
           if r.get('eval_average_return') is not None]
  steps = [r['train_average_steps_per_second'] for r in records
           if r.get('train_average_steps_per_second')]
  print('Finished {} iterations ({} training steps) in {} s of wall time this '
        'session; {:.0f} training steps/s on average.'.format(
            len(records), last.get('training_steps'), elapsed,
            sum(steps) / max(len(steps), 1)))
  if evals:
    print('Evaluation return: last {:.1f}, best {:.1f} (CartPole-v1 max: '
          '500).'.format(evals[-1], max(evals)))
print('Logs:           {}'.format(os.path.join(base_dir, 'logs',
                                                  'statistics.jsonl')))
print('TensorBoard:    tensorboard --logdir {}'.format(base_dir))
print('Checkpoints:    {}'.format(os.path.join(base_dir, 'checkpoints')))
print('Learning curve: {}'.format(os.path.join(base_dir,
                                                 'learning_curve.png')))
PY
