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
  # DeepSpeed JIT-builds the ops the trainer uses on CPU on first use (CPU Adam for offload,
  # the shared-memory collectives on every CPU run; ~30-80 s each on a busy machine): build
  # them once here, serially, so that trials and tests never race on (or time out waiting
  # for) a build lock. FusedAdam is never built: CPU configs set "torch_adam".
  "$VENV/bin/python" - >/dev/null <<'PY'
from deepspeed.accelerator import get_accelerator
for name in ("CPUAdamBuilder", "ShareMemCommBuilder"):
    try:
        builder = get_accelerator().create_op_builder(name)
    except Exception:  # an accelerator without that op (e.g. no shm comm on CUDA)
        builder = None
    if builder is not None and builder.is_compatible():
        builder.load()
PY
else
  "${PIP[@]}" install -e .
fi
