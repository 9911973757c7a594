#!/bin/sh
# A plan editor for `supervise plan evaluate` with an agent: it writes the
# fixed plan where its prompt says and, like a hurried model, first gives
# api's sprint core's test command (a check moved across units), then its
# own. Each prompt is kept beside $AGENT_LOG (prompt.<attempt>).
set -eu
log="${AGENT_LOG:-/dev/null}"
cp "$SUPERVISE_PROMPT_FILE" "$log.prompt.$SUPERVISE_ATTEMPT"
echo "$SUPERVISE_UNIT $SUPERVISE_DISPATCH_ID" >> "$log"
p=$(grep -o '`[^`]*/plans/[^`]*`' "$SUPERVISE_PROMPT_FILE" | head -1 | tr -d '`')
mkdir -p "$(dirname "$p")"
if [ "$SUPERVISE_ATTEMPT" = 1 ]; then check='cargo test -p core'; else check='cargo test -p api'; fi
printf '# Shop\n\n| Work Unit | Dependencies |\n|---|---|\n| core | none |\n| api | core |\n\n## core\n### Sprint 1: Types\n- Write `core/src/types.rs`\n\n**Exit criteria**:\n- [ ] `cargo test -p core` passes\n\n## api\n### Sprint 1: Handlers\n- Write `api/src/handlers.rs`\n\n**Exit criteria**:\n- [ ] `%s` passes\n' "$check" > "$p"
git add -A && git commit -qm "plan: attempt $SUPERVISE_ATTEMPT"
echo "PLAN_CREATED: $p"
