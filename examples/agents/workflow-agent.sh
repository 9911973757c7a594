#!/bin/sh
# A toy agent for work without a written plan (supervise solve / manage), used
# by `scripts/demo solve` and the tests: it plays every role by its unit's
# name and writes where its prompt says (its plan is always the same small
# one). For the tests it can be scripted:
# $AGENT_BEHAVIOUR holds lines "<unit> <action>[,<action>…]"; the k-th
# invocation for a unit takes the k-th action (the last repeats). Actions:
#   ok | fail | bad (a plan the reader refuses, or a malformed manager answer)
#   | nofix (a debug round that analyses but fixes nothing) | slow (sleep, then ok)
# Each invocation appends "<unit> <dispatch id>" to $AGENT_LOG. The manager's
# answers come from $AGENT_TASKS: how many tasks to hand out before null.
set -eu
log="${AGENT_LOG:-/dev/null}"
n=$(grep -c "^$SUPERVISE_UNIT " "$log" 2>/dev/null || true)
n=$(( ${n:-0} + 1 ))
echo "$SUPERVISE_UNIT $SUPERVISE_DISPATCH_ID" >> "$log"
actions=$(awk -v u="$SUPERVISE_UNIT" '$1==u {print $2; exit}' "${AGENT_BEHAVIOUR:-/dev/null}")
[ -n "$actions" ] || actions=ok
action=$(echo "$actions" | awk -F, -v n="$n" '{ if (n <= NF) print $n; else print $NF }')
if [ "$action" = slow ]; then sleep "${AGENT_SLOW:-1}"; action=ok; fi
prompt=$(cat "$SUPERVISE_PROMPT_FILE")
# The first backquoted path of the given kind in the prompt.
path_of() { printf '%s\n' "$prompt" | grep -o "\`[^\`]*$1[^\`]*\`" | head -1 | tr -d '\`'; }
commit() { git add -A && git commit -qm "$SUPERVISE_UNIT: $1"; }
[ "$action" = fail ] && { echo "error: could not finish"; exit 1; }
case "$SUPERVISE_UNIT" in
  research-*)
    p=$(path_of /reports/); mkdir -p "$(dirname "$p")"
    printf '# Findings\n\nThe API lives in src/api.rs; its handlers share one client, so a limit belongs in\nthe middleware before them. Two approaches fit: a token bucket per client key, or a fixed\nwindow counter. The bucket smooths bursts and is what the clients expect.\n\n## Recommendation\n\nA token bucket in the middleware.\n' > "$p"; commit "report"
    echo "REPORT_CREATED: $p" ;;
  overview)
    p=$(path_of OVERVIEW.md); mkdir -p "$(dirname "$p")"
    printf '# Overview\n\nThe question: where a rate limit belongs. Every report puts it in the middleware\nbefore the handlers (001, 002); they differ on the algorithm, a token bucket (002)\nor a fixed window (003).\n\n## Recommendation\n\nA token bucket in the middleware.\n' > "$p"; commit "overview"
    echo "OVERVIEW_CREATED: $p" ;;
  plan)
    p=$(path_of /plans/); mkdir -p "$(dirname "$p")"
    if [ "$action" = bad ]; then
      printf '# A plan\n\nWe will do it well.\n' > "$p"
    else
      printf '# Rate limiting\n\n## limiter\n### Sprint 1: Token bucket\n- [ ] `limiter.txt` exists\n\n## config\n### Sprint 1: Settings\n- [ ] `config.txt` exists\n\n## wiring\nDependencies: limiter, config\n### Sprint 1: Middleware\n- [ ] `wiring.txt` exists\n' > "$p"
    fi
    commit "plan"; echo "PLAN_CREATED" ;;
  testing)
    p=$(path_of /debug/); mkdir -p "$(dirname "$p")"
    if [ -f fixed.txt ]; then s=passing; else s=failing; fi
    printf '# Test results\n\n%s\n\nTEST_STATUS: %s\n' "$s" "$s" > "$p"; commit "test results"
    echo "TEST_STATUS: $s" ;;
  debug)
    p=$(path_of /debug/001_); mkdir -p "$(dirname "$p")"
    printf '## Round %s\n\nThe limiter ignored the burst size.\n' "$n" >> "$p"
    [ "$action" = nofix ] || echo fixed > fixed.txt
    if [ -f fixed.txt ]; then s=passing; else s=failing; fi
    printf '\nTEST_STATUS: %s\n' "$s" >> "$p"
    commit "debug round $n"; echo "DEBUG_REPORT_CREATED: $p" ;;
  docs)
    p=$(path_of /summaries/); mkdir -p "$(dirname "$p")"
    printf '# Summary\n\nRate limiting added.\n' > "$p"; commit "summary"
    echo "SUMMARY_CREATED: $p" ;;
  manager-*)
    k=${SUPERVISE_UNIT#manager-}
    total=${AGENT_TASKS:-2}
    kanban=$(path_of KANBAN.md)
    [ -f "$kanban" ] || { echo "error: no kanban at $kanban"; exit 1; }
    if [ "$action" = bad ]; then
      echo '{"next_task": "tasks/9.md", "tasks": []}' > "$SUPERVISE_RESULT_FILE"
    else
      tasks=""; i=1
      while [ "$i" -le "$total" ]; do
        if [ "$i" -lt "$k" ]; then st=done; else st=todo; fi
        tasks="$tasks${tasks:+, }{\"state\": \"$st\", \"file\": \"tasks/$i.md\"}"
        i=$((i + 1))
      done
      if [ "$k" -le "$total" ]; then next="\"tasks/$k.md\""; else next=null; fi
      echo "{\"next_task\": $next, \"tasks\": [$tasks]}" > "$SUPERVISE_RESULT_FILE"
      echo "- manager round $k" >> "$kanban"; commit "kanban"
    fi
    echo "Done." ;;
  task-*)
    f=$(printf '%s\n' "$prompt" | grep -o 'tasks/[0-9]*\.md' | head -1)
    mkdir -p tasks; echo "done by $SUPERVISE_DISPATCH_ID" > "$f.log"; commit "$f"
    echo "DONE" ;;
  *)
    echo "$SUPERVISE_UNIT" > "$SUPERVISE_UNIT.txt"; commit "work"; echo "Done." ;;
esac
