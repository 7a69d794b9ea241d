#!/bin/bash
# Measures `syncd validate` on a generated schema shaped like a real
# application's (MusicBrainz: 375 tables) in one pattern source mb.* with
# mode: auto and cursor: [updated_at] (docs/BENCHMARKS.md, "Many tables:
# validate on a 375-table schema"): 150 tables with a cursor column and its
# index (5 with 2,000 rows), 100 without a cursor column (compare mode), 50
# without a primary key (skipped), 25 partitioned tables (2 partitions
# each, 5 with 2,000 rows), 50 with a nullable, unindexed cursor column (5
# with 20,000 rows, 1% NULL). The copies do not exist yet (an empty sink
# database). Against the PostgreSQL on 127.0.0.1:5432 (trust auth, user
# postgres); it creates and drops the databases syncd_mbsrc_PID and
# syncd_mbsink_PID. It prints validate's wall time, exit code and output
# lines, and the sessions and transactions it caused on both databases
# (pg_stat_database, read once its sessions have ended).
# With STATEMENT_LOG=1 the two databases log every statement's duration
# (log_min_duration_statement = 0) to the server log, and the script
# counts validate's statements and sums their server-side time from it.
# BINARY may be several, comma-separated (base,new): each run runs each
# in turn on the same schema, so that they see the same machine load.
# usage: scripts/measure-validate.sh BINARY[,BINARY...] [RUNS]
set -u
BINS=$1; RUNS=${2:-1}; DIR=$(mktemp -d)
SRC=syncd_mbsrc_$$; SNK=syncd_mbsink_$$
PSQL="psql -h 127.0.0.1 -U postgres -qAt -v ON_ERROR_STOP=1"
cleanup() { $PSQL -d postgres -c "DROP DATABASE IF EXISTS $SRC" -c "DROP DATABASE IF EXISTS $SNK"; rm -rf "$DIR"; }
trap cleanup EXIT
$PSQL -d postgres -c "CREATE DATABASE $SRC" -c "CREATE DATABASE $SNK" || exit 1
# SINK_SCHEMA=1: the copies' schema exists in the sink (their trials then
# create no schema).
[ -n "${SINK_SCHEMA:-}" ] && { $PSQL -d $SNK -c "CREATE SCHEMA mb" || exit 1; }
$PSQL -d $SRC >/dev/null <<'SQL' || exit 1
CREATE SCHEMA mb;
DO $$
DECLARE i int; t text;
BEGIN
  FOR i IN 1..375 LOOP
    t := format('mb.t%s', lpad(i::text, 4, '0'));
    IF i <= 150 THEN -- a cursor column and its index
      EXECUTE format('CREATE TABLE %s (id bigint PRIMARY KEY, name text NOT NULL, n integer, updated_at timestamptz NOT NULL DEFAULT now())', t);
      EXECUTE format('CREATE INDEX ON %s (updated_at, id)', t);
      IF i <= 5 THEN
        EXECUTE format('INSERT INTO %s (id, name, n) SELECT g, ''r''||g, g FROM generate_series(1, 2000) g', t);
      END IF;
    ELSIF i <= 250 THEN -- no cursor column: compare mode
      EXECUTE format('CREATE TABLE %s (id integer PRIMARY KEY, name text NOT NULL, note text)', t);
    ELSIF i <= 300 THEN -- no primary key: skipped
      EXECUTE format('CREATE TABLE %s (a integer, b text, updated_at timestamptz)', t);
    ELSIF i <= 325 THEN -- partitioned, two partitions
      EXECUTE format('CREATE TABLE %s (id bigint NOT NULL, k integer NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(), v text, PRIMARY KEY (id, k)) PARTITION BY LIST (k)', t);
      EXECUTE format('CREATE TABLE %s_p0 PARTITION OF %s FOR VALUES IN (0)', t, t);
      EXECUTE format('CREATE TABLE %s_p1 PARTITION OF %s FOR VALUES IN (1)', t, t);
      EXECUTE format('CREATE INDEX ON %s (updated_at, id, k)', t);
      IF i <= 305 THEN
        EXECUTE format('INSERT INTO %s (id, k, v) SELECT g, g %% 2, ''v''||g FROM generate_series(1, 2000) g', t);
      END IF;
    ELSE -- a nullable, unindexed cursor column
      EXECUTE format('CREATE TABLE %s (id bigint PRIMARY KEY, v text, updated_at timestamptz)', t);
      IF i <= 330 THEN
        EXECUTE format('INSERT INTO %s (id, v, updated_at) SELECT g, ''v''||g, CASE WHEN g %% 100 = 0 THEN NULL ELSE now() - g * interval ''1 s'' END FROM generate_series(1, 20000) g', t);
      END IF;
    END IF;
  END LOOP;
END $$;
ANALYZE;
SQL
cat > $DIR/mb.yaml <<Y
name: mb
mode: auto
source:
  dsn: postgres://postgres@127.0.0.1:5432/$SRC?sslmode=disable
  table: mb.*
  cursor: [updated_at]
sink:
  dsn: postgres://postgres@127.0.0.1:5432/$SNK?sslmode=disable
  table: mb.*
Y
LOG=${SERVER_LOG:-/var/log/postgresql/postgresql-15-main.log}
if [ -n "${STATEMENT_LOG:-}" ]; then
  $PSQL -d postgres -c "ALTER DATABASE $SRC SET log_min_duration_statement = 0" -c "ALTER DATABASE $SNK SET log_min_duration_statement = 0"
fi
stats() { $PSQL -d postgres -c "SELECT coalesce(sum(sessions),0)||' '||coalesce(sum(xact_commit+xact_rollback),0) FROM pg_stat_database WHERE datname IN ('$SRC','$SNK')"; }
for r in $(seq 1 $RUNS); do for BIN in ${BINS//,/ }; do
  # the stats collector's counters of ended sessions, before and after
  $PSQL -d postgres -c "SELECT pg_stat_clear_snapshot()" >/dev/null
  read s0 x0 < <(stats)
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  L0=$(wc -l < $LOG 2>/dev/null || echo 0)
  T0=$(date +%s.%N)
  /usr/bin/time -f "%U+%S" -o $DIR/cpu.txt $BIN validate --config $DIR/mb.yaml --state $DIR/state.db > $DIR/out.txt 2>&1
  RC=$?
  T1=$(date +%s.%N)
  # sessions are counted when they end; wait for validate's to go
  while [ "$($PSQL -d postgres -c "SELECT count(*) FROM pg_stat_activity WHERE datname IN ('$SRC','$SNK')")" != 0 ]; do sleep 0.1; done
  sleep 1 # pg_stat_database is flushed by the ended backends within a second
  read s1 x1 < <(stats)
  echo "run $r, $BIN: validate $(echo "$T1 - $T0" | bc) s, exit $RC, $(wc -l < $DIR/out.txt) lines, $((s1-s0)) sessions, $((x1-x0)) transactions, CPU user+sys $(tail -1 $DIR/cpu.txt) s; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ -n "${STATEMENT_LOG:-}" ]; then
    tail -n +$((L0+1)) $LOG | grep -E "@($SRC|$SNK) .*duration:" | awk -v src=$SRC '{n[$0 ~ "@"src" " ? "source" : "sink"]++; for(i=1;i<=NF;i++) if($i=="duration:") ms[$0 ~ "@"src" " ? "source" : "sink"]+=$(i+1)} END {for(k in n) printf "  %s: %d statements, %.1f s server-side\n", k, n[k], ms[k]/1000}'
  fi
  [ -n "${KEEP_OUTPUT:-}" ] && cp $DIR/out.txt "$KEEP_OUTPUT.$r.$(basename $BIN)"
done; done
