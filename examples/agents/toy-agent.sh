#!/bin/sh
# A toy agent for demonstrations: it reads the prompt, creates every file an exit
# criterion says must exist (and the word a `grep -q WORD FILE` criterion wants),
# commits, and reports. Real agents (Claude Code, Codex, aider…) go in its place.
#
# TOY_AGENT_FLAKY="unit/sprint …" makes the first attempt of those sprints fail,
# to show a retry on a stronger model.
set -eu
echo "toy agent: $SUPERVISE_UNIT sprint $SUPERVISE_SPRINT, attempt $SUPERVISE_ATTEMPT, model $SUPERVISE_MODEL"
for f in ${TOY_AGENT_FLAKY:-}; do
  if [ "$f" = "$SUPERVISE_UNIT/$SUPERVISE_SPRINT" ] && [ "$SUPERVISE_ATTEMPT" = 1 ]; then
    echo "error: could not finish (simulated flaky first attempt)"
    exit 1
  fi
done
# Exit criteria look like: - [ ] `core/name.txt` exists   or   - [ ] `grep -q word core/name.txt` passes.
# Their paths are the project root's, where the agent starts, as the prompt says.
sed -n 's/^- \[ \] `\([^` ]*\)` exists.*/\1/p' "$SUPERVISE_PROMPT_FILE" | while read -r file; do
  mkdir -p "$(dirname "$file")"
  [ -f "$file" ] || echo "$SUPERVISE_UNIT: $SUPERVISE_SPRINT_NAME" > "$file"
done
sed -n 's/^- \[ \] `grep -q \([^ ]*\) \([^`]*\)`.*/\1 \2/p' "$SUPERVISE_PROMPT_FILE" | while read -r word file; do
  mkdir -p "$(dirname "$file")"
  echo "$word" >> "$file"
done
sleep "${TOY_AGENT_SLEEP:-0}"
git add -A
git commit -qm "$SUPERVISE_UNIT: Sprint $SUPERVISE_SPRINT — $SUPERVISE_SPRINT_NAME" || true
echo "supervise:turns=7"
echo "Done: all checks pass, committed."
