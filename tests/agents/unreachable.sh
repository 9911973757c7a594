#!/bin/sh
# An agent whose model provider cannot be reached: it asks its model (through
# the supervisor's model proxy, with its token) a few times, as a CLI retries,
# then ends as Claude Code does when its retries are spent: a JSON result
# with the API's error status, exit 1.
for i in 1 2 3 4 5; do
  curl -s -o /dev/null -w '%{http_code}\n' -H "x-api-key: $ANTHROPIC_API_KEY" \
    -H 'content-type: application/json' -d '{}' "$ANTHROPIC_BASE_URL/v1/messages"
done
echo '{"type":"result","subtype":"error_during_execution","is_error":true,"api_error_status":502,"result":"API Error: 502 the provider could not be reached"}'
exit 1
