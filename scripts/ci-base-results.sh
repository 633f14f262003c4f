#!/usr/bin/env bash
# Fetch the base branch's latest results, for the comparison gate on pull requests:
#
#   scripts/ci-base-results.sh WORKFLOW ARTIFACT BRANCH DEST
#
# WORKFLOW is a file under .github/workflows (linux-cpu.yml), ARTIFACT the name
# its gate job uploads reports/out/ under (results-linux-cpu). Newest first, the
# last successful push runs of WORKFLOW on BRANCH are searched for one that
# still holds ARTIFACT with a results.json; it is downloaded into DEST. Prints
# where; under GitHub Actions writes results=DEST/results.json to $GITHUB_OUTPUT,
# for `make gate COMPARE=DEST/results.json`.
#
# No such run (a new repository or branch, artifacts expired): says why, writes
# results= (empty) and exits 0; the job runs make gate without COMPARE.
# No GitHub CLI, or gh failing to list runs (token, permissions): exits non-zero,
# since a regression gate must not switch itself off silently.
#
# Needs the GitHub CLI (gh) with GH_TOKEN, and GH_REPO outside a clone.
# BASE_RUNS_LIMIT (default 10) is how many runs to look through.
set -euo pipefail

if [ $# -ne 4 ]; then
  echo "usage: $0 WORKFLOW ARTIFACT BRANCH DEST" >&2
  exit 2
fi
workflow=$1
artifact=$2
branch=$3
dest=$4
limit=${BASE_RUNS_LIMIT:-10}

set_output() {
  if [ -n "${GITHUB_OUTPUT:-}" ]; then
    echo "results=$1" >>"$GITHUB_OUTPUT"
  fi
}

no_base() {
  echo "::notice title=No base results::$1: the comparison with $branch is skipped; make gate runs without COMPARE"
  set_output ""
  exit 0
}

if ! command -v gh >/dev/null; then
  echo "::error title=GitHub CLI missing::gh is needed to fetch $branch's results for the comparison gate; install it on this runner" >&2
  exit 1
fi

runs=$(gh run list --workflow "$workflow" --branch "$branch" --event push --status success \
  --limit "$limit" --json databaseId --jq '.[].databaseId')
if [ -z "$runs" ]; then
  no_base "no successful push run of $workflow on $branch yet"
fi

tried=0
for run in $runs; do
  tried=$((tried + 1))
  rm -rf "$dest"
  if gh run download "$run" --name "$artifact" --dir "$dest" && [ -f "$dest/results.json" ]; then
    echo "base results: $dest/results.json (artifact $artifact of run $run of $workflow on $branch)"
    set_output "$dest/results.json"
    exit 0
  fi
  echo "run $run of $workflow has no $artifact artifact with a results.json (expired or never uploaded)"
done
rm -rf "$dest"
no_base "none of the last $tried successful runs of $workflow on $branch has an artifact $artifact with a results.json"
