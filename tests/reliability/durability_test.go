package reliability

import (
	"context"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// durableSink starts a throwaway cluster that runs as a production server
// does (fsync = on), to be crashed under a sync. Its WAL writer waits as
// long as PostgreSQL allows (10 s) between rounds, so that the last
// asynchronous commits are still only in the server's memory when the test
// crashes it right after a page: the window the reporter hit by chance
// (100 to 135 rows lost) is hit every time.
func durableSink(t *testing.T) *pgtest.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := pgtest.StartCluster(ctx, "fsync = on", "wal_writer_delay = '10s'")
	if err != nil {
		t.Fatalf("throwaway cluster: %v", err)
	}
	t.Cleanup(func() { cl.Destroy(context.Background()) })
	return cl
}

// clusterExec runs statements as superuser in cl's postgres database, on
// a new connection (the server may have been restarted since the last).
func clusterExec(t *testing.T, cl *pgtest.Cluster, qs ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cl.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range qs {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// withURL returns raw with its user replaced (when user is not "") and the
// query parameter key=value added.
func withURL(t *testing.T, raw, user, key, value string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		u.User = url.User(user)
	}
	if key != "" {
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // libpq reads + as itself
	}
	return u.String()
}

// logLine is a line of a run's debug log, as far as these tests read it.
type logLine struct {
	Msg  string `json:"msg"`
	Page int64  `json:"page"`
	AsOf string `json:"as_of"`
}

// runUntil starts `run --once` with a debug log and, at the first log line
// for which crash is true, stops the sink's server with pg_ctl -m
// immediate while the syncd process is stopped (SIGSTOP); once the run has
// ended it starts the server again. It returns
// the run's result, the line the crash followed and the highest page the
// run reported.
func runUntil(t *testing.T, cl *pgtest.Cluster, cfg, state string, crash func(logLine) bool) (r result, at logLine, pages int64) {
	t.Helper()
	ctx := context.Background()
	p := bin.Start(t, nil, "run", "--once", "--log-level", "debug", "--config", cfg, "--state", state)
	crashed := false
	// Each record in turn, as soon as it is written, until the run ends.
	for i := 0; ; i++ {
		rec, ok := p.Stderr.Nth(2*time.Minute, i)
		if !ok {
			break
		}
		var e logLine
		if rec.Decode(&e) != nil {
			continue
		}
		if e.Msg == "page applied" || e.Msg == "page granted" {
			pages = max(pages, e.Page)
		}
		if !crashed && crash(e) {
			// Hold syncd still while its sink crashes, so the crash meets
			// the watermark of this very page, not one a few pages on.
			p.Signal(t, syscall.SIGSTOP)
			err := cl.Stop(ctx, "immediate")
			p.Signal(t, syscall.SIGCONT)
			if err != nil {
				t.Fatal(err)
			}
			crashed, at = true, e
		}
	}
	r = p.Wait(t, 2*time.Minute)
	if !crashed {
		t.Fatalf("the run ended before the moment of the crash; the crash was not exercised: %s", r)
	}
	if err := cl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return r, at, pages
}

// afterPage crashes right after the run reports page n (its watermark
// written).
func afterPage(n int64) func(logLine) bool {
	return func(e logLine) bool { return (e.Msg == "page applied" || e.Msg == "page granted") && e.Page >= n }
}

// lostBehind counts the source rows at or before the stored watermark that
// the copy does not hold with equal values: rows the watermark has passed
// and the next run will never read again.
func lostBehind(t *testing.T, src *pgxpool.Pool, dst *pgx.Conn, watermark []string) (behind, lost int) {
	t.Helper()
	if watermark == nil {
		return 0, 0
	}
	ctx := context.Background()
	rows, err := src.Query(ctx, `SELECT id, md5(x::text) FROM src x WHERE (updated_at, id) <= ($1::timestamptz, $2::bigint)`, watermark[0], watermark[1])
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{}
	var id int64
	var h string
	if _, err := pgx.ForEachRow(rows, []any{&id, &h}, func() error { want[id] = h; return nil }); err != nil {
		t.Fatal(err)
	}
	got := map[int64]string{}
	var exists bool
	if err := dst.QueryRow(ctx, `SELECT to_regclass('public.copy') IS NOT NULL`).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists { // the crash may have lost the table syncd created
		rows, err = dst.Query(ctx, `SELECT id, md5(x::text) FROM copy x`)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pgx.ForEachRow(rows, []any{&id, &h}, func() error { got[id] = h; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for id, h := range want {
		if got[id] != h {
			lost++
		}
	}
	return len(want), lost
}

// TestDurabilityWhateverTheSinkSettings: the sink's synchronous_commit is
// off through each place a setting can come from (the database, the role,
// the DSN's options, a trigger on the copy, the server's configuration),
// with fsync = on. The sink's server is crashed (pg_ctl -m immediate) right
// after a run has written a page's watermark, and restarted; then every
// source row at or before the stored watermark is in the copy with equal
// values, and after the next run the copy equals the source row by row.
// The last subtest does the same for a coupon campaign. Before syncd made
// its commits durable itself, the rows of the last pages before the crash
// were lost for good while every later run exited 0.
func TestDurabilityWhateverTheSinkSettings(t *testing.T) {
	ctx := context.Background()
	cl := durableSink(t)
	const rows, pageSize = 10_000, 50
	src := pgtest.NewDB(t)
	namedTable(t, src.Pool, "src", rows)
	for _, where := range []string{"database", "role", "dsn", "trigger", "server"} {
		t.Run(where, func(t *testing.T) {
			sinkDB := clusterDB(t, cl)
			dsn := sinkDB.URL
			switch where {
			case "database":
				clusterExec(t, cl, `ALTER DATABASE `+pgx.Identifier{sinkDB.Name}.Sanitize()+` SET synchronous_commit = off`)
			case "role":
				clusterExec(t, cl, `CREATE ROLE durability_writer LOGIN SUPERUSER`, `ALTER ROLE durability_writer SET synchronous_commit = off`)
				dsn = withURL(t, dsn, "durability_writer", "", "")
			case "dsn":
				dsn = withURL(t, dsn, "", "options", "-c synchronous_commit=off")
			case "trigger":
				// A copy made by an administrator, whose trigger turns
				// synchronous_commit off in every transaction that writes it.
				for _, q := range []string{
					`CREATE TABLE copy (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, val text)`,
					`CREATE FUNCTION lazy() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN PERFORM set_config('synchronous_commit', 'off', true); RETURN NULL; END$$`,
					`CREATE TRIGGER lazy AFTER INSERT OR UPDATE ON copy FOR EACH ROW EXECUTE FUNCTION lazy()`,
				} {
					if _, err := sinkDB.Pool.Exec(ctx, q); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
			case "server":
				clusterExec(t, cl, `ALTER SYSTEM SET synchronous_commit = off`, `SELECT pg_reload_conf()`)
				t.Cleanup(func() { clusterExec(t, cl, `ALTER SYSTEM RESET synchronous_commit`, `SELECT pg_reload_conf()`) })
			}
			// The setting really reaches syncd's sessions.
			if got := showSetting(t, dsn, where == "trigger"); got != "off" {
				t.Fatalf("synchronous_commit in a session of the sink DSN is %q, want off", got)
			}
			dir := t.TempDir()
			cfg := writeFile(t, dir, "durable.yaml", tableConfig{Name: "durable", SourceDSN: src.URL, Table: "public.src",
				Cursor: "[updated_at, id]", SinkDSN: dsn, SinkTable: "public.copy", PageSize: pageSize}.YAML())
			state := filepath.Join(dir, "state.db")
			r, at, seen := runUntil(t, cl, cfg, state, afterPage(3))
			if r.Code != 1 {
				t.Fatalf("the run hit by the crash must exit 1: %s", r)
			}
			dst, err := pgx.Connect(ctx, sinkDB.URL)
			if err != nil {
				t.Fatal(err)
			}
			wm := cursorOf(t, cfg, state, "durable")
			behind, lost := lostBehind(t, src.Pool, dst, wm)
			dst.Close(ctx)
			t.Logf("crash after %q (the run reported %d pages): watermark %v, %d source rows at or before it, %d missing from the copy", at.Msg, seen, wm, behind, lost)
			if lost != 0 {
				t.Errorf("the watermark was ahead of what the sink had made durable: %d of the %d rows at or before it were lost by the crash", lost, behind)
			}
			if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
				t.Fatalf("run after the crash: %s", r)
			}
			sinkDB.Pool.Reset() // its connections died with the server
			n := sameRows(t, src.Pool, "src", sinkDB.Pool, "copy")
			if n != rows {
				t.Fatalf("copy holds %d rows, want %d", n, rows)
			}
			t.Logf("REPORT durability-%s: rows=%d crashes=1 lost=0 duplicates=0", where, n)
		})
	}
	t.Run("coupon", func(t *testing.T) { campaignDurability(t, cl) })
}

// showSetting opens a session with dsn and returns its synchronous_commit;
// with inWrite, as it stands inside a transaction after a write to copy.
func showSetting(t *testing.T, dsn string, inWrite bool) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if inWrite {
		if _, err := tx.Exec(ctx, `INSERT INTO copy VALUES (0, now(), 'probe')`); err != nil {
			t.Fatal(err)
		}
	}
	var v string
	if err := tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// campaignDurability: a coupon campaign whose sink database has
// synchronous_commit = off (ALTER DATABASE), fsync = on.
// The sink's server is crashed right after the run logs the campaign
// frozen, then right after a granted page; after each crash the frozen
// campaign is still there with the as_of the log reported, and every
// target up to the state file's cursor and up to the campaign's progress
// cursor holds its grant. The final run grants every target exactly once.
func campaignDurability(t *testing.T, cl *pgtest.Cluster) {
	ctx := context.Background()
	src := pgtest.NewDB(t)
	want := couponMembers(t, src, 20_000)
	sinkDB := clusterDB(t, cl)
	clusterExec(t, cl, `ALTER DATABASE `+pgx.Identifier{sinkDB.Name}.Sanitize()+` SET synchronous_commit = off`)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "camp.yaml", couponYAML("camp", src.URL, sinkDB.URL, campaign, 50))
	state := filepath.Join(dir, "state.db")

	// ungranted counts the targets at or before key that hold no grant.
	ungranted := func(conn *pgx.Conn, key string) int64 {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM coupon_grants_target_chunks c, unnest(c.key_1) AS u(k) WHERE c.campaign_id = $1 AND u.k::bigint <= $2::bigint
  AND NOT EXISTS (SELECT 1 FROM coupon_grants g WHERE g.campaign_id = c.campaign_id AND g.member_id = u.k::bigint)`, campaign, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	failures := 0
	for i, crash := range []func(logLine) bool{
		func(e logLine) bool { return e.Msg == "campaign frozen" },
		afterPage(3),
	} {
		r, at, pages := runUntil(t, cl, cfg, state, crash)
		if r.Code != 1 {
			t.Fatalf("crash %d: the run hit by the crash must exit 1: %s", i+1, r)
		}
		conn, err := pgx.Connect(ctx, sinkDB.URL)
		if err != nil {
			t.Fatal(err)
		}
		var asOf time.Time
		var progress []string
		err = conn.QueryRow(ctx, `SELECT as_of, cursor FROM syncd_campaigns WHERE campaign_id = $1`, campaign).Scan(&asOf, &progress)
		switch {
		case err != nil:
			t.Errorf("crash %d (after %q): the frozen campaign is gone from the sink: %v", i+1, at.Msg, err)
			failures++
		case at.AsOf != "" && asOf.UTC().Format(time.RFC3339Nano) != at.AsOf:
			t.Errorf("crash %d: the campaign was logged frozen at %s but the sink holds as_of %s", i+1, at.AsOf, asOf.UTC().Format(time.RFC3339Nano))
		}
		stateCursor := cursorOf(t, cfg, state, "camp")
		var lostState, lostProgress int64
		if err == nil && stateCursor != nil {
			lostState = ungranted(conn, stateCursor[0])
		}
		if err == nil && progress != nil {
			lostProgress = ungranted(conn, progress[0])
		}
		conn.Close(ctx)
		t.Logf("crash %d after %q (run reported %d pages): state cursor %v, progress %v, targets without a grant behind them: %d, %d", i+1, at.Msg, pages, stateCursor, progress, lostState, lostProgress)
		if lostState != 0 || lostProgress != 0 {
			t.Errorf("crash %d: %d targets at or before the state file's cursor and %d at or before the campaign's progress hold no grant", i+1, lostState, lostProgress)
			failures++
		}
	}
	if failures != 0 {
		return
	}
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("final run: %s", r)
	}
	sinkDB.Pool.Reset()
	var got []int64
	rows, err := sinkDB.Pool.Query(ctx, `SELECT member_id FROM coupon_grants WHERE campaign_id = $1 ORDER BY member_id`, campaign)
	if err != nil {
		t.Fatal(err)
	}
	if got, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%d targets, %d grants (a member granted twice or a target missed)", len(want), len(got))
	}
	t.Logf("REPORT durability-coupon: members=20000 targets=%d grants=%d crashes=2", len(want), len(got))
}

// TestFsyncOffWarning: a sink server running with fsync = off cannot keep
// what syncd commits through a crash of its machine, and syncd cannot
// change that. `validate` says so with one warning naming the sink
// database and the fix, and a run logs it once and still succeeds, for a
// table copy and a coupon campaign alike.
func TestFsyncOffWarning(t *testing.T) {
	_, local, remote := restartable(t) // remote: the package's cluster, fsync = off
	namedTable(t, local.Pool, "src", 1_000)
	couponMembers(t, local, 2_000)
	u, err := url.Parse(remote.URL)
	if err != nil {
		t.Fatal(err)
	}
	want := "sink database postgres@" + u.Host + "/" + remote.Name + " runs with fsync = off, so its commits are not durable: a crash of its machine can lose rows the watermark has already passed; set fsync = on in that server's postgresql.conf and reload it, or run syncd reconcile --repair after every crash of that machine"
	dir := t.TempDir()
	for _, c := range []struct{ name, yaml string }{
		{"table", tableConfig{Name: "table", SourceDSN: local.URL, Table: "public.src", Cursor: "[updated_at, id]",
			SinkDSN: remote.URL, SinkTable: "public.copy", PageSize: 100}.YAML()},
		{"camp", couponYAML("camp", local.URL, remote.URL, campaign, 100)},
	} {
		cfg := writeFile(t, dir, c.name+".yaml", c.yaml)
		r := bin.Run(t, nil, "validate", "--config", cfg)
		if r.Code != 0 || !strings.Contains(r.Stdout, c.name+": warning: "+want+"\n") {
			t.Fatalf("%s: validate must exit 0 with the line %q: %s", c.name, c.name+": warning: "+want, r)
		}
		r = bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", filepath.Join(dir, c.name+".db"))
		if r.Code != 0 {
			t.Fatalf("%s: run: %s", c.name, r)
		}
		n := 0
		for _, e := range testutil.ParseLines(r.Stderr) {
			if e.Match(want, "level", "WARN", "source", c.name) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%s: the run logged the fsync warning %d times, want once: %s", c.name, n, r)
		}
	}
	sameRows(t, local.Pool, "src", remote.Pool, "copy")
	t.Logf("REPORT fsync-off: validate warns, run warns once, exit 0, copy equal")
}
