#!/usr/bin/env bash
# mxlinear inside vLLM, checked on the CPU. A virtual environment of its own (build/vllm-venv)
# gets vLLM from PyPI with the torch it pins; mxlinear goes in as a wheel built in the package's
# build environment (build/python-venv, torch 2.11; see test-python.sh), installed without its
# dependencies so nothing is rebuilt against vLLM's torch. Then python/vllm_tests: the plug-in's
# entry point and registration, vLLM's kernel choice on a faked sm_90 device, weight processing
# and the layer's output through mxlinear's CPU reference. Arguments go to pytest.
#   MXLINEAR_VLLM_VERSION  vLLM release to test (default 0.34.0)
#   MXLINEAR_VLLM_VENV     its environment (default build/vllm-venv)
#   MXLINEAR_VLLM_LEAVE_OUT  vLLM requirements not to install (default flashinfer-python)
#   MXLINEAR_PYTHON_VENV   the build environment (default build/python-venv)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
vllm_version="${MXLINEAR_VLLM_VERSION:-0.34.0}"
build_venv="${MXLINEAR_PYTHON_VENV:-$PWD/build/python-venv}"
vllm_venv="${MXLINEAR_VLLM_VENV:-$PWD/build/vllm-venv}"
wheels="$PWD/build/wheels"
pip_flags=(-q --no-cache-dir --disable-pip-version-check)
start=$(date +%s)

if [ ! -x "$build_venv/bin/python" ]; then
  python3 -m venv "$build_venv"
fi
"$build_venv/bin/pip" install "${pip_flags[@]}" "torch==2.11.0" "scikit-build-core>=0.10" ninja
rm -f "$wheels"/mxlinear-*.whl
"$build_venv/bin/pip" wheel "${pip_flags[@]}" --no-build-isolation --no-deps . -w "$wheels"
wheel=$(echo "$wheels"/mxlinear-*.whl)
built=$(date +%s)

if [ ! -x "$vllm_venv/bin/python" ]; then
  python3 -m venv "$vllm_venv"
fi
# vLLM 0.34.0 pins flashinfer-python==0.7.3, which PyPI does not serve. So vLLM goes in without
# dependencies, then its requirements less the projects in MXLINEAR_VLLM_LEAVE_OUT (default
# flashinfer-python; none of the checks runs a FlashInfer kernel, and vLLM's FlashInfer kernels
# report themselves unsupported without it).
read -ra leave_out <<<"${MXLINEAR_VLLM_LEAVE_OUT-flashinfer-python}"
"$vllm_venv/bin/pip" install "${pip_flags[@]}" --no-deps "vllm==$vllm_version"
"$vllm_venv/bin/pip" install "${pip_flags[@]}" packaging pytest
"$vllm_venv/bin/python" scripts/vllm_requirements.py vllm "${leave_out[@]}" \
  >"$vllm_venv/vllm-requirements.txt"
"$vllm_venv/bin/pip" install "${pip_flags[@]}" -r "$vllm_venv/vllm-requirements.txt"
# --no-deps: the wheel asks for the torch it was built with; vLLM's torch stays.
"$vllm_venv/bin/pip" install "${pip_flags[@]}" --no-deps --force-reinstall "$wheel"
installed=$(date +%s)

echo "test-vllm: wheel $(basename "$wheel") built in $((built - start)) s;" \
  "vLLM environment ready in $((installed - built)) s ($(du -sh "$vllm_venv" | cut -f1));" \
  "vLLM requirements left out: ${leave_out[*]:-none}"
"$vllm_venv/bin/python" -c \
  'import torch, vllm; print(f"test-vllm: vllm {vllm.__version__}, torch {torch.__version__}")'

cd python/vllm_tests
status=0
"$vllm_venv/bin/python" -m pytest -v --no-header -rfEs --tb=short -p no:cacheprovider "$@" \
  || status=$?
echo "test-vllm: pytest exit $status after $(($(date +%s) - start)) s in all"
exit "$status"
