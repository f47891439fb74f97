#!/usr/bin/env bash
# Fails if shellcheck finds a problem in the repository's shell scripts (it parses them as bash
# does not: a directive inside a multi-line command once hid every later check of
# device-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v shellcheck >/dev/null 2>&1; then
  echo "shellcheck: SKIPPED (no shellcheck)"
  exit 0
fi
mapfile -t scripts < <(git ls-files '*.sh' .ci/run)
shellcheck "${scripts[@]}"
echo "shellcheck: ${#scripts[@]} scripts clean"
