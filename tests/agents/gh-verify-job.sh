#!/bin/sh
# The `verify` job of .github/workflows/supervise-agent.yml, for the fake
# GitHub's runner: no credential at all, a checkout of the commit dispatched
# on, the trusted supervise binary, and what the agent's job handed on
# ($FAKE_ARTIFACTS_IN/agent). The verdict goes to $FAKE_ARTIFACTS_OUT (the
# `supervise-verdict` artifact).
set -eu
"$SUPERVISE_BIN" verify --plan "$INPUT_PLAN" --unit "$INPUT_UNIT" --sprint "$INPUT_SPRINT" \
  --record "$INPUT_DISPATCH_ID" --branch "$INPUT_BRANCH" \
  --handoff "$FAKE_ARTIFACTS_IN/agent" --out "$FAKE_ARTIFACTS_OUT" > /dev/null
