#!/usr/bin/env bash
# Install the system tools the test suite uses, when they are missing:
# chromium for the report's browser tests (reports/tests/test_browser.py),
# ShellCheck for the workflow and script lint (meta_tests/test_workflows.py) and
# clang-19 for the Metal arm's front-end check (impl/kernels/test_metal_frontend.py).
# Debian/Ubuntu: apt-get (through sudo when not root). Elsewhere (macOS) it
# says what is missing and how to get it; those tests then skip, saying so.
#
#   scripts/ci-tools.sh [chromium] [shellcheck] [clang-19]      (default: all three)
set -euo pipefail

if [ $# -eq 0 ]; then
  set -- chromium shellcheck clang-19
fi
missing=()
for tool in "$@"; do
  case "$tool" in
    chromium | shellcheck | clang-19) ;;
    *) echo "ci-tools: unknown tool '$tool' (known: chromium, shellcheck, clang-19)" >&2; exit 2 ;;
  esac
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if command -v apt-get >/dev/null; then
  echo "ci-tools: installing ${missing[*]} (Debian packages)"
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "ci-tools: not installed: ${missing[*]} (their tests skip; on macOS: brew install shellcheck llvm@19 (MLXGATE_CLANG=\$(brew --prefix llvm@19)/bin/clang), and Chromium as /usr/bin/chromium or on PATH)" >&2
fi
