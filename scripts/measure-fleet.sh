#!/bin/bash
# Measures an idle daemon with N small tables (20 rows) in one pattern at
# @every 5s against the PostgreSQL on 127.0.0.1:5432 (trust auth, user
# postgres; it creates and drops database fleetd_measure): the time until
# every copy exists on first start, the peak syncd sessions on that
# database (pg_stat_activity sampled every 100 ms), then over one idle
# minute the daemon's CPU seconds, its INFO lines and its peak sessions.
# usage: scripts/measure-fleet.sh BINARY [N] [syncd run flags...]
set -u
BIN=$1; N=${2:-300}; DIR=$(mktemp -d); rm -rf $DIR; mkdir -p $DIR
PSQL="psql -h 127.0.0.1 -U postgres -qAt"
$PSQL -c "DROP DATABASE IF EXISTS fleetd_measure" -c "CREATE DATABASE fleetd_measure"
{
echo "CREATE SCHEMA copy;"
for i in $(seq 1 $N); do
 echo "CREATE TABLE t$i (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), v text); CREATE INDEX ON t$i (updated_at, id); INSERT INTO t$i (id, v) SELECT g, 'v'||g FROM generate_series(1,20) g;"
done
} | $PSQL -d fleetd_measure >/dev/null
DSN="postgres://postgres@127.0.0.1:5432/fleetd_measure?sslmode=disable"
cat > $DIR/fleet.yaml <<Y
name: fleet
schedule: "@every 5s"
source:
  dsn: $DSN
  table: public.t*
  cursor: [updated_at, id]
sink:
  dsn: $DSN
  table: copy.*
Y
shift; [ $# -gt 0 ] && shift
$BIN run --config $DIR/fleet.yaml --state $DIR/state.db --listen "" --log-format json "$@" > $DIR/log.json 2>&1 &
PID=$!
T0=$(date +%s.%N)
PEAK=0
# sample sessions every 100 ms until all copies exist
while :; do
 S=$($PSQL -d postgres -c "select count(*) from pg_stat_activity where application_name='syncd' and datname='fleetd_measure'")
 [ "$S" -gt "$PEAK" ] && PEAK=$S
 C=$($PSQL -d fleetd_measure -c "select count(*) from pg_tables where schemaname='copy'")
 if [ "$C" -ge "$N" ]; then break; fi
 if [ $(echo "$(date +%s.%N) - $T0 > 300" | bc) = 1 ]; then echo "timeout: $C copies"; break; fi
 sleep 0.1
done
T1=$(date +%s.%N)
echo "all $N copies exist after $(echo "$T1 - $T0" | bc) s; peak syncd sessions during first start: $PEAK"
# let it settle 20 s, then one minute idle
sleep 20
L0=$(wc -l < $DIR/log.json); I0=$(grep -c '"level":"INFO"' $DIR/log.json)
read u0 s0 < <(awk '{print $14, $15}' /proc/$PID/stat)
PEAK=0; END=$(( $(date +%s) + 60 ))
while [ $(date +%s) -lt $END ]; do
 S=$($PSQL -d postgres -c "select count(*) from pg_stat_activity where application_name='syncd' and datname='fleetd_measure'")
 [ "$S" -gt "$PEAK" ] && PEAK=$S
 sleep 0.1
done
read u1 s1 < <(awk '{print $14, $15}' /proc/$PID/stat)
I1=$(grep -c '"level":"INFO"' $DIR/log.json); L1=$(wc -l < $DIR/log.json)
TCK=$(getconf CLK_TCK)
echo "idle minute: CPU $(echo "scale=2; (($u1-$u0)+($s1-$s0))/$TCK" | bc) s; INFO lines $((I1-I0)); all lines $((L1-L0)); peak syncd sessions $PEAK"
grep '"msg":"summary"' $DIR/log.json | tail -1
grep -c 'too many clients\|too_many_connections' $DIR/log.json | sed 's/^/connection failures logged: /'
echo "log: $DIR/log.json"
kill -TERM $PID; wait $PID
psql -h 127.0.0.1 -U postgres -qAt -c "DROP DATABASE IF EXISTS fleetd_measure"
