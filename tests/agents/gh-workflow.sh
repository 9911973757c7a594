#!/bin/sh
# The steps of .github/workflows/supervise-agent.yml, for the fake GitHub's
# runner: the inputs arrive as INPUT_* variables, the agent runs in the checkout
# of the sprint branch, then `supervise verify --record` commits the results.
# (The fake pushes what was committed, as the workflow's push step does.)
set -u
export SUPERVISE_DISPATCH_ID="$INPUT_DISPATCH_ID"
export SUPERVISE_UNIT="$INPUT_UNIT"
export SUPERVISE_UNIT_DIR="${INPUT_DIRECTORY:-.}"
export SUPERVISE_SPRINT="$INPUT_SPRINT"
export SUPERVISE_ATTEMPT="$INPUT_ATTEMPT"
export SUPERVISE_MODEL="$INPUT_MODEL"
export SUPERVISE_MAX_TURNS="$INPUT_MAX_TURNS"
export SUPERVISE_PROMPT_FILE="$PWD/$INPUT_PROMPT_FILE"
out=$(mktemp)
answer=$(mktemp -u)
export SUPERVISE_RESULT_FILE="$answer"
sh -c "$AGENT" < "$SUPERVISE_PROMPT_FILE" > "$out" 2>&1
code=$?
"$SUPERVISE_BIN" verify --plan "$INPUT_PLAN" --unit "$INPUT_UNIT" --sprint "$INPUT_SPRINT" \
  --record "$INPUT_DISPATCH_ID" --agent-exit "$code" --agent-output "$out" > /dev/null
rm -f "$out" "$answer"
exit "$code"
