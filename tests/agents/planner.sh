#!/bin/sh
# A planning agent for `supervise plan breakdown` with an agent: it writes
# the plan where its prompt says and, like a hurried model, makes the
# classic mistakes on its first attempt — a requirement left out and a
# vague exit criterion — then fixes them. Each prompt is kept beside
# $AGENT_LOG (prompt.<attempt>) so a test can read what it was told.
set -eu
log="${AGENT_LOG:-/dev/null}"
cp "$SUPERVISE_PROMPT_FILE" "$log.prompt.$SUPERVISE_ATTEMPT"
echo "$SUPERVISE_UNIT $SUPERVISE_DISPATCH_ID" >> "$log"
p=$(grep -o '`[^`]*/plans/[^`]*`' "$SUPERVISE_PROMPT_FILE" | head -1 | tr -d '`')
mkdir -p "$(dirname "$p")"
if [ "$SUPERVISE_ATTEMPT" = 1 ]; then
  printf '# Bookmarks\n\n## exports\n### Sprint 1: Exports\n- Add support for JSON export\n- Add support for CSV export\n- Add support for HTML export\n\n**Exit criteria**:\n- [ ] It works correctly\n' > "$p"
else
  printf '# Bookmarks\n\n## exports\n### Sprint 1: Exports\n- Add support for JSON export\n- Add support for CSV export\n- Add support for HTML export\n\n**Exit criteria**:\n- [ ] `exports.txt` exists\n\n## search\n### Sprint 1: Search\n- Implement `bm search` to find bookmarks by tag\n\n**Exit criteria**:\n- [ ] `search.txt` exists\n' > "$p"
fi
git add -A && git commit -qm "plan: attempt $SUPERVISE_ATTEMPT"
echo "PLAN_CREATED: $p"
