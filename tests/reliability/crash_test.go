package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// crashSource creates public.src with n rows in ties of 250 rows a minute apart (so a 5 s lookback re-reads one tie)
// over the past, every column type whose text form could be mangled on the
// way (tabs, newlines, backslashes, NULLs, json, bytea, arrays, floats).
func crashSource(t *testing.T, db *pgtest.DB, n int) {
	t.Helper()
	db.Exec(t, `CREATE TABLE src (
  id bigint PRIMARY KEY,
  updated_at timestamptz NOT NULL,
  val text,
  amount numeric(14,4),
  doc jsonb,
  raw bytea,
  tags int[],
  flag boolean,
  ratio double precision,
  version int NOT NULL DEFAULT 0
)`)
	db.Exec(t, `CREATE UNIQUE INDEX src_cursor ON src (updated_at, id)`)
	db.Exec(t, `INSERT INTO src (id, updated_at, val, amount, doc, raw, tags, flag, ratio)
SELECT g,
  timestamptz '2026-01-01 00:00:00.123456+00' + (g / 250) * interval '1 minute',
  CASE WHEN g % 17 = 0 THEN NULL ELSE 'row ' || g || E'\ttab\nnewline\\backslash "q" ''s'' é' END,
  g * 1.0001,
  jsonb_build_object('g', g, 's', 'x' || g),
  decode(md5(g::text), 'hex'),
  ARRAY[g, g % 7],
  g % 2 = 0,
  g / 7.0::float8
FROM generate_series(1, $1) g`, n)
	db.Exec(t, `ANALYZE src`)
}

// writer changes the source until ctx ends: updates that move rows to the
// head of the cursor, and bursts of inserts sharing one timestamp.
func writer(ctx context.Context, t *testing.T, db *pgtest.DB, firstID int64, stats *writerStats) {
	next := firstID
	for ctx.Err() == nil {
		lo := rand.Int64N(next - 100)
		_, err := db.Pool.Exec(ctx, `UPDATE src SET updated_at = now(), version = version + 1, val = val || '+', amount = amount + 1 WHERE id IN (SELECT unnest($1::bigint[]))`,
			[]int64{lo, lo + 7, lo + 31, lo + 64, rand.Int64N(next), rand.Int64N(next)})
		if err == nil {
			stats.add(0, 6)
		}
		burst := 10 + rand.IntN(30)
		_, err = db.Pool.Exec(ctx, `INSERT INTO src (id, updated_at, val, amount, doc, raw, tags, flag, ratio)
SELECT g, now(), E'burst\t' || g, g, jsonb_build_object('burst', g), '\x00ff'::bytea, ARRAY[g], NULL, 0.1 FROM generate_series($1::bigint, $2::bigint) g`, next, next+int64(burst)-1)
		if err == nil {
			next += int64(burst)
			stats.add(burst, 0)
		}
		// Pacing: a live writer's rate, not a wait for anything.
		time.Sleep(time.Duration(20+rand.IntN(20)) * time.Millisecond)
	}
}

type writerStats struct {
	mu               sync.Mutex
	inserts, updates int
}

func (s *writerStats) add(ins, upd int) {
	s.mu.Lock()
	s.inserts += ins
	s.updates += upd
	s.mu.Unlock()
}

// logPage is one "page applied" (table) or "page granted" (coupon) record
// of a run's debug log.
type logPage struct {
	Page   int64    `json:"page"`
	Rows   int      `json:"rows"`
	Cursor []string `json:"cursor"`
}

// checkRunLog checks one run's log: pages numbered 1, 2, 3... with no gap,
// cursors strictly increasing, and returns the last logged cursor.
func checkRunLog(t *testing.T, run int, stderr string) (last []string, pages int64, first time.Time) {
	t.Helper()
	for _, l := range lines(stderr) {
		rec, err := testutil.ParseLine(l)
		if err != nil || !strings.HasPrefix(l, "{") {
			// A SIGKILL can cut the last line short; nothing else may be unparsable.
			if !strings.HasSuffix(stderr, l) {
				t.Fatalf("run %d: log line is not a JSON record: %q", run, l)
			}
			continue
		}
		if rec.Msg() != "page applied" && rec.Msg() != "page granted" {
			continue
		}
		var e logPage
		if err := rec.Decode(&e); err != nil {
			t.Fatalf("run %d: %v: %s", run, err, l)
		}
		if e.Page != pages+1 {
			t.Fatalf("run %d: page %d logged after page %d: a page was skipped", run, e.Page, pages)
		}
		if last != nil && compareCursor(t, last, e.Cursor) >= 0 {
			t.Fatalf("run %d: page %d ends at %v, not after the previous page's %v", run, e.Page, e.Cursor, last)
		}
		if pages == 0 {
			first = rec.Time()
		}
		last, pages = e.Cursor, e.Page
	}
	return last, pages, first
}

func TestKill9DuringSync(t *testing.T) {
	rows, kills, pageSize := 200_000, 60, 100
	if soak() {
		rows, kills = 1_000_000, 300
	}
	db := pgtest.NewDB(t)
	crashSource(t, db, rows)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "crash.yaml", tableConfig{
		Name: "crash", SourceDSN: db.URL, Table: "public.src", Cursor: "[updated_at, id]",
		SinkDSN: db.URL, SinkTable: "public.copy", PageSize: pageSize,
		// These kills test the page loop and its log; the first load of
		// an empty copy has its own kill test (TestFirstLoadSurvivesKills
		// in cmd/syncd).
		Extra: "  first_load: {workers: 0}\n",
	}.YAML())
	state := filepath.Join(dir, "state.db")
	var started time.Time
	if err := db.Pool.QueryRow(context.Background(), "SELECT now()").Scan(&started); err != nil {
		t.Fatal(err)
	}

	ctx, stopWriter := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ws writerStats
	wg.Add(1)
	go func() { defer wg.Done(); writer(ctx, t, db, int64(rows)+1, &ws) }()
	defer func() { stopWriter(); wg.Wait() }()

	var prev []string
	t0 := time.Now()
	ks := killLoop(t, cfg, state, kills, 200*time.Millisecond, func(run int, lastLogged []string) {
		cur := cursorOf(t, cfg, state, "crash")
		if compareCursor(t, prev, cur) > 0 {
			t.Fatalf("after run %d the watermark moved back from %v to %v", run, prev, cur)
		}
		if lastLogged != nil && compareCursor(t, lastLogged, cur) > 0 {
			t.Fatalf("after run %d the watermark %v is behind the last logged page %v", run, cur, lastLogged)
		}
		prev = cur
		if cur == nil || run%5 != 0 {
			return
		}
		// Rows no writer touched and at or before the watermark must be in
		// the copy exactly: otherwise a page was skipped.
		var lost int64
		err := db.Pool.QueryRow(context.Background(), `
SELECT count(*) FROM src s
WHERE s.updated_at < $1 AND (s.updated_at, s.id) <= ($2::timestamptz, $3::bigint)
  AND NOT EXISTS (SELECT 1 FROM copy c WHERE c.id = s.id AND (c.*)::text = (s.*)::text)`, started, cur[0], cur[1]).Scan(&lost)
		if err != nil {
			t.Fatal(err)
		}
		if lost != 0 {
			t.Fatalf("after run %d, %d source rows at or before the watermark %v are missing or different in the copy", run, lost, cur)
		}
	})
	stopWriter()
	wg.Wait()
	killPhase := time.Since(t0)

	r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state)
	if r.Code != 0 {
		t.Fatalf("final run: %s", r)
	}
	missing, extra := diff(t, db, "src", "copy")
	if missing != 0 || extra != 0 {
		t.Fatalf("after %d kills the copy differs from the source: %d rows missing or different, %d extra", ks.live, missing, extra)
	}
	// syncd's own value-level reconcile agrees.
	if r := bin.Run(t, nil, "reconcile", "--config", cfg, "--state", state, "--source", "crash"); r.Code != 0 {
		t.Fatalf("reconcile after the kills: %s", r)
	}
	n := count(t, db, "src")
	t.Logf("REPORT kill9-table: rows=%d (initial %d, inserted %d, updated %d) %s kill_phase=%s lost=0 duplicates=0",
		n, rows, ws.inserts, ws.updates, ks, killPhase.Round(time.Second))
}

// killStats says where the kills of a killLoop landed.
type killStats struct {
	live, inLoop, finished, attempts int
	pages                            int64
	startup                          time.Duration
}

func (k killStats) String() string {
	return fmt.Sprintf("kills_mid_run=%d kills_in_page_loop=%d runs_finished=%d pages_logged=%d startup=%s",
		k.live, k.inLoop, k.finished, k.pages, k.startup.Round(time.Millisecond))
}

// killLoop starts `run --once` again and again, sending SIGKILL after a
// random delay (about the start-up time plus up to spread), until kills
// runs were killed while alive. After each run it
// checks the run's log (checkRunLog) and calls after with the run number
// and the last cursor the log reported applied.
func killLoop(t *testing.T, cfg, state string, kills int, spread time.Duration, after func(run int, lastLogged []string)) killStats {
	t.Helper()
	ks := killStats{startup: 40 * time.Millisecond} // exec to first page, then measured
	// A run killed before its first page makes no progress (a campaign's
	// freeze, for one, takes a while): the next delay grows until one does;
	// a run that finishes first makes the next delay shorter.
	cur := spread
	for ks.live < kills {
		ks.attempts++
		if ks.attempts > kills*4 {
			t.Fatalf("only %d of %d attempts killed a running syncd", ks.live, ks.attempts)
		}
		startedAt := time.Now()
		p := bin.Start(t, nil, "run", "--once", "--config", cfg, "--state", state, "--log-level", "debug")
		// Most kills land in the page loop, some during start-up (whose
		// length is measured from the logs), and the kills do not give the
		// runs enough time to finish the first sync. The random delay is
		// the thing under test: where the kill lands.
		delay := ks.startup*7/10 + time.Duration(rand.Int64N(int64(ks.startup*6/10+cur)))
		killed := false
		timer := time.NewTimer(delay)
		var r result
		select {
		case <-p.Done():
			timer.Stop()
			if r = p.Wait(t, time.Minute); r.Code != 0 {
				t.Fatalf("run %d failed by itself: %s", ks.attempts, r)
			}
			ks.finished++
		case <-timer.C:
			switch r = p.Kill(t); {
			case r.Signal == syscall.SIGKILL:
				ks.live++
				killed = true
			case r.Code != 0:
				t.Fatalf("run %d: %s", ks.attempts, r)
			default:
				ks.finished++
			}
		}
		lastLogged, pages, firstPage := checkRunLog(t, ks.attempts, r.Stderr)
		if !firstPage.IsZero() {
			ks.startup = (ks.startup*4 + firstPage.Sub(startedAt)) / 5
		}
		ks.pages += pages
		if killed && pages > 0 {
			ks.inLoop++
		}
		// A kill that lands before the first page waits longer next time,
		// one in the page loop at most spread; a run that finished by
		// itself (on a fast host the copy catches up, and a run is then
		// only its start-up and a page or two) is killed sooner next time.
		switch {
		case killed && pages == 0:
			cur = min(cur*2, 10*time.Second)
		case killed:
			cur = min(cur, spread)
		default:
			cur = max(cur/2, time.Millisecond)
		}
		after(ks.attempts, lastLogged)
	}
	return ks
}
