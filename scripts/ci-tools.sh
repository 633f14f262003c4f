#!/usr/bin/env bash
# Install the system tools the test suite uses, when they are missing:
# chromium for the report's browser tests (reports/tests/test_browser.py) and
# ShellCheck for the workflow and script lint (meta_tests/test_workflows.py).
# Debian/Ubuntu: apt-get (through sudo when not root). Elsewhere (macOS) it
# says what is missing and how to get it; those tests then skip, saying so.
#
#   scripts/ci-tools.sh [chromium] [shellcheck]      (default: both)
set -euo pipefail

if [ $# -eq 0 ]; then
  set -- chromium shellcheck
fi
missing=()
for tool in "$@"; do
  case "$tool" in
    chromium | shellcheck) ;;
    *) echo "ci-tools: unknown tool '$tool' (known: chromium, shellcheck)" >&2; exit 2 ;;
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
  echo "ci-tools: not installed: ${missing[*]} (their tests skip; on macOS: brew install shellcheck, and Chromium as /usr/bin/chromium or on PATH)" >&2
fi
