#!/bin/sh
# The `publish` job of .github/workflows/supervise-agent.yml, for the fake
# GitHub's runner: the only job with a write credential (an installation
# token of the App, and a checkout whose `origin` takes pushes). It runs no
# repository code: the trusted supervise binary pushes the commit the verify
# job checked, with the record, and vouches for the record with a check run.
set -eu
if [ "$INPUT_SPRINT" = final ]; then
  exec "$SUPERVISE_BIN" publish --final --record "$INPUT_DISPATCH_ID" --branch "$INPUT_BRANCH" \
    --verdict "$FAKE_ARTIFACTS_IN/verify"
fi
"$SUPERVISE_BIN" publish --record "$INPUT_DISPATCH_ID" --branch "$INPUT_BRANCH" \
  --handoff "$FAKE_ARTIFACTS_IN/agent" --verdict "$FAKE_ARTIFACTS_IN/verify"
