#!/usr/bin/env bash
# Set up a virtual environment for `plan`.
#   scripts/setup.sh          planner only (pydantic, typer, rich, numpy): what a login node needs
#   scripts/setup.sh --full   + trainer/tuner/service/test dependencies (torch, DeepSpeed, Optuna, ...)
# An existing torch in the venv is kept; a fresh venv gets the pinned CPU-capable torch==2.13.0.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${PLAN_VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
if [ "${1:-}" = "--full" ]; then
  if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    "${PIP[@]}" install "torch==2.13.0"
  fi
  "${PIP[@]}" install -e ".[test]"
  # DeepSpeed JIT-builds its CPU Adam op on first use (~30 s): build it once here, serially,
  # so that trials and tests never race on (or time out waiting for) the build lock.
  "$VENV/bin/python" -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load()" >/dev/null
else
  "${PIP[@]}" install -e .
fi
