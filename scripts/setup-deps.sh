#!/usr/bin/env bash
# Installs what the build needs, only where it is missing (safe to run again, and a no-op on a
# machine that has everything, such as an offline GPU machine). Debian/Ubuntu package names.
set -euo pipefail

need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_file() { [ -e "$1" ]; }

have_cmd cmake || need+=(cmake)
have_cmd ninja || need+=(ninja-build)
have_cmd g++ || need+=(g++)
have_cmd clang-format || need+=(clang-format)
have_cmd python3 || need+=(python3)  # the tests of scripts/
# The Python package (scripts/test-python.sh): venv and the headers of the extension module.
python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
have_cmd python3 && have_file "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ||
  need+=(python3-dev)
have_file /usr/include/gtest/gtest.h || need+=(libgtest-dev)
have_file /usr/include/gmock/gmock.h || need+=(libgmock-dev)
have_file /usr/include/CLI/CLI.hpp || need+=(libcli11-dev)
have_file /usr/include/nlohmann/json.hpp || need+=(nlohmann-json3-dev)
have_file /usr/include/fmt/format.h || need+=(libfmt-dev)

if [ ${#need[@]} -gt 0 ]; then
  echo "setup-deps: installing ${need[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# Optional: the scripts' lint test (ctest `shellcheck`) skips visibly without it, so a machine
# that cannot install it (an offline GPU machine) still builds and tests.
if ! have_cmd shellcheck && have_cmd apt-get; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    shellcheck >/dev/null 2>&1 || echo "setup-deps: shellcheck not installed (optional)"
fi

if ! have_cmd nvcc; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "setup-deps: nvcc is in /usr/local/cuda/bin; add it to PATH" >&2
  else
    echo "setup-deps: the CUDA 13 toolkit (nvcc) is required and is not installed" >&2
  fi
  exit 1
fi
