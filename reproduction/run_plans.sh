#!/usr/bin/env bash
# Run plan variants one after another and append each command's wall time to
# reproduction/timings.tsv. Usage (from the repository root):
#   reproduction/run_plans.sh VARIANT PLAN [PLAN ...] [-- EXTRA run-plan ARGUMENTS]
# e.g. reproduction/run_plans.sh default toy_fixed_batch table1
#      reproduction/run_plans.sh fashion-mnist table1 -- --override params.seeds=[0]
# Small models train fastest single-threaded on a shared 2-core machine.
set -euo pipefail
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
variant="$1"; shift
plans=()
while [[ $# -gt 0 && "$1" != "--" ]]; do plans+=("$1"); shift; done
[[ "${1:-}" == "--" ]] && shift
for plan in "${plans[@]}"; do
  start=$(date +%s)
  .venv/bin/python -m sde_core run-plan "$plan" --variant "$variant" "$@"
  end=$(date +%s)
  printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$plan" "$variant" "$((end - start))" "$*" \
    >> reproduction/timings.tsv
done
