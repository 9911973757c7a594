#!/bin/sh
# The steps of .github/workflows/supervise-agent.yml, for the fake GitHub's
# runner: the inputs arrive as INPUT_* variables in a checkout of the commit
# dispatched on (the integration branch's head); the sprint branch is taken
# from origin when an earlier attempt left it, else cut here; the prompt is the
# `prompt` input (or `@path`, a file committed on the sprint branch); then the
# agent runs and `supervise verify --record` commits the results. (The fake
# pushes the checkout's HEAD to the `branch` input, as the push step does.)
set -u
if git rev-parse -q --verify "refs/remotes/origin/$INPUT_BRANCH" > /dev/null; then
  git checkout -q -B "$INPUT_BRANCH" "refs/remotes/origin/$INPUT_BRANCH"
else
  git checkout -q -B "$INPUT_BRANCH"
fi
export SUPERVISE_BASE="$(git rev-parse HEAD)"
export SUPERVISE_DISPATCH_ID="$INPUT_DISPATCH_ID"
export SUPERVISE_UNIT="$INPUT_UNIT"
export SUPERVISE_UNIT_DIR="${INPUT_DIRECTORY:-.}"
export SUPERVISE_SPRINT="$INPUT_SPRINT"
export SUPERVISE_SPRINT_NAME="${INPUT_SPRINT_NAME:-}"
export SUPERVISE_ATTEMPT="$INPUT_ATTEMPT"
export SUPERVISE_MODEL="$INPUT_MODEL"
export SUPERVISE_MAX_TURNS="$INPUT_MAX_TURNS"
export SUPERVISE_PROMPT_FILE="$(mktemp)"
case "$INPUT_PROMPT" in
  @*) cp -- "${INPUT_PROMPT#@}" "$SUPERVISE_PROMPT_FILE" ;;
  *) printf '%s' "$INPUT_PROMPT" > "$SUPERVISE_PROMPT_FILE" ;;
esac
out=$(mktemp)
answer=$(mktemp -u)
export SUPERVISE_RESULT_FILE="$answer"
sh -c "$AGENT" < "$SUPERVISE_PROMPT_FILE" > "$out" 2>&1
code=$?
"$SUPERVISE_BIN" verify --plan "$INPUT_PLAN" --unit "$INPUT_UNIT" --sprint "$INPUT_SPRINT" \
  --record "$INPUT_DISPATCH_ID" --agent-exit "$code" --agent-output "$out" > /dev/null
rm -f "$out" "$answer" "$SUPERVISE_PROMPT_FILE"
exit "$code"
