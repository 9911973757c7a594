#!/bin/sh
# The `agent` job of .github/workflows/supervise-agent.yml, for the fake
# GitHub's runner. Like the shipped job it holds no credential that can write:
# its token reads, its checkout's `origin` takes no push, and it has no App
# key. It takes the sprint branch as the remote has it (or cuts it from the
# commit dispatched on), runs the agent, and hands on its commits as a git
# bundle with its exit status, output and answer ($FAKE_ARTIFACTS_OUT stands
# for the `supervise-handoff` artifact).
set -u
# `if: inputs.sprint != 'final'`: the final verification runs no agent.
[ "$INPUT_SPRINT" = final ] && exit 0
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
export SUPERVISE_PROMPT_FILE="$RUNNER_TEMP/supervise-prompt.md"
export SUPERVISE_RESULT_FILE="$RUNNER_TEMP/supervise-result"
case "$INPUT_PROMPT" in
  @*) cp -- "${INPUT_PROMPT#@}" "$SUPERVISE_PROMPT_FILE" ;;
  *) printf '%s' "$INPUT_PROMPT" > "$SUPERVISE_PROMPT_FILE" ;;
esac
# The agent's own copy of supervise, on its PATH: what it does to it stays
# on this runner.
mkdir -p "$RUNNER_TEMP/bin"
cp "$SUPERVISE_INSTALL_FROM" "$RUNNER_TEMP/bin/supervise"
release="$SUPERVISE_INSTALL_FROM"
unset SUPERVISE_INSTALL_FROM
export PATH="$RUNNER_TEMP/bin:$PATH"
out="$RUNNER_TEMP/agent-output.txt"
sh -c "$AGENT" < "$SUPERVISE_PROMPT_FILE" > "$out" 2>&1
code=$?
# Hand the work on, as the shipped step does: without the model key, and
# with a binary installed afresh (the one on the agent's PATH may be the
# agent's), masking the secrets' shapes. The verify job's scan step, which
# holds the key, masks it by value.
unset ANTHROPIC_API_KEY OPENAI_API_KEY
# A fresh directory of an unforeseeable name, inside the job's own temp
# (gone with the job).
fresh="$(mktemp -d "$RUNNER_TEMP/hand-on.XXXXXX")" || exit 1
cp "$release" "$fresh/supervise"
handoff="$FAKE_ARTIFACTS_OUT"
printf '%s' "$code" > "$handoff/agent-exit"
"$fresh/supervise" scrub < "$out" > "$handoff/agent-output.txt"
[ -f "$SUPERVISE_RESULT_FILE" ] && "$fresh/supervise" scrub < "$SUPERVISE_RESULT_FILE" > "$handoff/answer"
if [ "$(git rev-parse HEAD)" != "$SUPERVISE_BASE" ]; then
  git bundle create "$handoff/work.bundle" "$SUPERVISE_BASE..HEAD" 2> /dev/null
fi
exit 0
