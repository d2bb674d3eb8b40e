#!/usr/bin/env bash
# One-shot set-up of the docker-compose cluster (run by its `setup` service):
#   1. wait for Elasticsearch, 2. give the kibana_system user its password,
#   3. install the qres index templates, 4. wait for Kibana and import the saved objects.
# Needs ELASTIC_PASSWORD and KIBANA_PASSWORD; reads the JSON files beside it.
set -euo pipefail

ES_URL="${ES_URL:-http://elasticsearch:9200}"
KIBANA_URL="${KIBANA_URL:-http://kibana:5601}"
CONFIG_DIR="$(cd "$(dirname "$0")" && pwd)"
: "${ELASTIC_PASSWORD:?set ELASTIC_PASSWORD in .env}"
: "${KIBANA_PASSWORD:?set KIBANA_PASSWORD in .env}"

# Credentials reach curl through a private config file, never its command line (ps shows that).
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
chmod 700 "$WORK"
quote() { local s=${1//\\/\\\\}; printf '"%s"' "${s//\"/\\\"}"; }  # JSON / curl-config string
printf 'user = %s\n' "$(quote "elastic:$ELASTIC_PASSWORD")" >"$WORK/auth"
printf '{"password": %s}\n' "$(quote "$KIBANA_PASSWORD")" >"$WORK/kibana-password.json"

call() {  # call METHOD URL [CURL ARGS...]: fail with the server's answer unless it is a 2xx
  local method=$1 url=$2
  shift 2
  local code=""
  code=$(curl --silent --show-error --config "$WORK/auth" --request "$method" \
    --output "$WORK/answer" --write-out '%{http_code}' "$@" "$url")
  if [ "${code:0:1}" != 2 ]; then
    echo "setup: $method $url answered HTTP $code: $(head -c 2000 "$WORK/answer")" >&2
    exit 1
  fi
}

wait_for() {  # wait_for WHAT URL: until URL answers 200 (10 minutes at most)
  local code=""
  for _ in $(seq 1 120); do
    code=$(curl --silent --config "$WORK/auth" --output /dev/null --write-out '%{http_code}' \
      "$2" || true)
    if [ "$code" = 200 ]; then
      echo "setup: $1 is up"
      return 0
    fi
    sleep 5
  done
  echo "setup: $1 did not answer at $2 within 10 minutes (last HTTP code: $code)" >&2
  exit 1
}

wait_for Elasticsearch "$ES_URL/_cluster/health?wait_for_status=yellow&timeout=5s"

echo "setup: setting the kibana_system password"
call POST "$ES_URL/_security/user/kibana_system/_password" \
  --header 'Content-Type: application/json' --data-binary "@$WORK/kibana-password.json"

for name in questions search-log; do
  echo "setup: installing index template qres-$name"
  call PUT "$ES_URL/_index_template/qres-$name" \
    --header 'Content-Type: application/json' --data-binary "@$CONFIG_DIR/$name-template.json"
done

wait_for Kibana "$KIBANA_URL/api/status"

echo "setup: importing the qres data views and dashboard into Kibana"
call POST "$KIBANA_URL/api/saved_objects/_import?overwrite=true" \
  --header 'kbn-xsrf: qres-setup' \
  --form "file=@$CONFIG_DIR/kibana/qres.ndjson;type=application/ndjson"
if ! grep -Eq '"success": *true' "$WORK/answer"; then
  echo "setup: Kibana did not import every object: $(head -c 2000 "$WORK/answer")" >&2
  exit 1
fi
echo "setup: done (dashboard: qres search analytics)"
