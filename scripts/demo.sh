#!/usr/bin/env bash
# syncd demo: creates a source table full of equal timestamps on the local
# PostgreSQL, syncs it into a copy with `syncd run --once`, changes the
# source, syncs again, prints `syncd status`, and proves the copy equals the
# source row by row.
#
# It never drops a database it did not create: by default it creates a new,
# uniquely named one (syncd_demo_<time>_<pid>) and drops it at the end
# (DEMO_KEEP=1 keeps it). Every database it creates carries the comment
# "created by the syncd demo"; with DEMO_DB naming an existing database, it
# reuses it only when it carries that comment, and refuses otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
export PGHOST PGPORT PGUSER
DB=${DEMO_DB:-syncd_demo_$(date +%s)_$$}
MARKER="created by the syncd demo"
export DEMO_DSN="postgres://${PGUSER}@${PGHOST}:${PGPORT}/${DB}?sslmode=disable"
STATE=${DEMO_STATE:-$(mktemp -d)/syncd-demo.db}
BIN=${BIN:-bin/syncd}
psql_q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }

if ! pg_isready -q; then
  echo "demo: no PostgreSQL answers at ${PGHOST}:${PGPORT}; start it (or set PGHOST/PGPORT) and try again" >&2
  exit 1
fi
[[ -x $BIN ]] || go build -o "$BIN" ./cmd/syncd

if [[ ! $DB =~ ^[a-z_][a-z0-9_]*$ ]]; then
  echo "demo: DEMO_DB=${DB}: use lower-case letters, digits and _ only" >&2
  exit 2
fi
# is_demo_db: the database exists and carries the demo's comment.
is_demo_db() {
  [[ $(psql -X -At -d postgres -c "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = '$1'") == "$MARKER" ]]
}
exists=$(psql -X -At -d postgres -c "SELECT count(*) FROM pg_database WHERE datname = '${DB}'")
if [[ $exists != 0 ]]; then
  if ! is_demo_db "$DB"; then
    echo "demo: database ${DB} exists and was not created by the demo (no comment \"${MARKER}\"); it is left alone: unset DEMO_DB or name another database" >&2
    exit 2
  fi
  psql_q -d postgres -c "DROP DATABASE ${DB} WITH (FORCE)"
fi
echo "== creating database ${DB}: 100,000 orders, 40% of them sharing one updated_at"
psql_q -d postgres -c "CREATE DATABASE ${DB}" -c "COMMENT ON DATABASE ${DB} IS '${MARKER}'"
cleanup() {
  # Drop only what this run created, and only while it carries the marker.
  if [[ -z ${DEMO_KEEP:-} ]] && is_demo_db "$DB"; then
    psql_q -d postgres -c "DROP DATABASE ${DB} WITH (FORCE)"
  fi
}
trap cleanup EXIT
psql_q -d "$DB" <<'SQL'
CREATE TABLE public.orders (
  id         bigint PRIMARY KEY,
  updated_at timestamptz NOT NULL,
  customer   text NOT NULL,
  amount     numeric(12,2) NOT NULL,
  tags       text[],
  details    jsonb
);
INSERT INTO public.orders
SELECT g,
       CASE WHEN g % 5 < 2 THEN timestamptz '2026-11-01 00:00:00+00'
            ELSE timestamptz '2026-11-01 00:00:00+00' + g * interval '1 millisecond' END,
       'customer ' || (g % 977), (g % 10000) / 100.0, ARRAY['t' || (g % 7)], jsonb_build_object('n', g)
FROM generate_series(1, 100000) g;
CREATE INDEX orders_cursor ON public.orders (updated_at, id);
ANALYZE public.orders;
SQL

echo "== syncd validate"
$BIN validate --config configs/demo.yaml
echo "== syncd run --once (initial sync into public.orders_copy)"
$BIN run --once --config configs/demo.yaml --state "$STATE"

echo "== changing the source: 500 updates, 200 inserts"
psql_q -d "$DB" -c "UPDATE public.orders SET amount = amount + 1, updated_at = now() WHERE id % 200 = 0" \
  -c "INSERT INTO public.orders SELECT g, now(), 'new', 1, NULL, NULL FROM generate_series(100001, 100200) g"
echo "== syncd run --once (incremental)"
$BIN run --once --config configs/demo.yaml --state "$STATE"

echo "== syncd status"
$BIN status --config configs/demo.yaml --state "$STATE"

diff=$(psql -X -At -d "$DB" -c "SELECT count(*) FROM ((TABLE public.orders EXCEPT TABLE public.orders_copy) UNION ALL (TABLE public.orders_copy EXCEPT TABLE public.orders)) d")
rows=$(psql -X -At -d "$DB" -c "SELECT count(*) FROM public.orders_copy")
if [[ $diff != 0 ]]; then
  echo "demo: the copy differs from the source in ${diff} rows" >&2
  exit 1
fi
echo "== copy equals source: ${rows} rows compared value by value, 0 differences"
echo "   state file: ${STATE}"
if [[ -z ${DEMO_KEEP:-} ]]; then
  echo "   database ${DB} is dropped now (DEMO_KEEP=1 keeps it)"
else
  echo "   database ${DB} kept (it carries the comment \"${MARKER}\", so the demo may drop it later)"
fi
