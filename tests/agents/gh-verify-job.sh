#!/bin/sh
# The `verify` job of .github/workflows/supervise-agent.yml, for the fake
# GitHub's runner: no credential at all, a checkout of the commit dispatched
# on, the trusted supervise binary, and what the agent's job handed on
# ($FAKE_ARTIFACTS_IN/agent). The verdict goes to $FAKE_ARTIFACTS_OUT (the
# `supervise-verdict` artifact).
set -eu
# The final verification (sprint `final`): no agent's work, no key; every
# criterion of the sprints the order names, on the commit dispatched on.
if [ "$INPUT_SPRINT" = final ]; then
  "$SUPERVISE_BIN" verify --plan "$INPUT_PLAN" --unit "$INPUT_UNIT" --sprint "$INPUT_SPRINT" \
    --record "$INPUT_DISPATCH_ID" --branch "$INPUT_BRANCH" \
    --final "$INPUT_PROMPT" --out "$FAKE_ARTIFACTS_OUT" > /dev/null
  exit 0
fi
# The scan step: the only one holding the keys the agent's job held
# ($SCAN_SECRETS stands for the step's `secrets.*`), before any work runs.
SUPERVISE_SECRETS="${SCAN_SECRETS:-}" "$SUPERVISE_BIN" scan --branch "$INPUT_BRANCH" \
  --handoff "$FAKE_ARTIFACTS_IN/agent" --out "$RUNNER_TEMP/scan" 2> /dev/null
unset SCAN_SECRETS
"$SUPERVISE_BIN" verify --plan "$INPUT_PLAN" --unit "$INPUT_UNIT" --sprint "$INPUT_SPRINT" \
  --record "$INPUT_DISPATCH_ID" --branch "$INPUT_BRANCH" \
  --handoff "$FAKE_ARTIFACTS_IN/agent" --scan "$RUNNER_TEMP/scan" --out "$FAKE_ARTIFACTS_OUT" > /dev/null
