package syncer_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/syncd/syncd/cli"
	"github.com/syncd/syncd/source"
)

// TestMeasureBoundCost measures what the bound costs while a long read-only
// report transaction is open: a writer inserts 50 rows/s stamped with now(),
// syncd runs every second, and a report transaction stays open for
// SYNCD_BENCH_REPORT seconds (default 60). It logs the worst lag (now minus
// the watermark) for each source.bound setting, and the cost of computing
// the bound. Run with SYNCD_BENCH_BOUND=1 (make bench-bound).
func TestMeasureBoundCost(t *testing.T) {
	if os.Getenv("SYNCD_BENCH_BOUND") == "" {
		t.Skip("measurement: set SYNCD_BENCH_BOUND=1 (make bench-bound)")
	}
	report := 60 * time.Second
	if s := os.Getenv("SYNCD_BENCH_REPORT"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("SYNCD_BENCH_REPORT=%q: want seconds", s)
		}
		report = time.Duration(n) * time.Second
	}
	for _, mode := range []string{"transactions", "writers", "off"} {
		t.Run(mode, func(t *testing.T) { measureLag(t, mode, report) })
	}
	t.Run("bound query", measureBoundQuery)
}

func measureLag(t *testing.T, mode string, report time.Duration) {
	f := newFixture(t)
	c := f.config(t, f.db.URL, "lookback: 0s", "bound: "+mode)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for id := 1; ; id++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := f.db.Pool.Exec(ctx, "INSERT INTO src (id, v) VALUES ($1, 'w')", id); err != nil && ctx.Err() == nil {
				t.Errorf("writer: %v", err)
				return
			}
		}
	}()
	defer func() { cancel(); <-done }()

	start := time.Now()
	var rep *session
	var reportEnd time.Time
	var worst, worstAfter time.Duration
	caughtUp := time.Duration(-1)
	for time.Since(start) < report+8*time.Second {
		if rep == nil && reportEnd.IsZero() && time.Since(start) > 2*time.Second {
			rep = begin(t, f.db.URL)
			rep.exec(t, "SELECT count(*) FROM src")
		}
		if rep != nil && time.Since(rep.since) > report {
			rep.exec(t, "COMMIT")
			rep, reportEnd = nil, time.Now()
		}
		res := f.run(t, c)
		if len(res.Cursor) > 0 || len(f.watermark(t)) > 0 {
			wm, _ := cli.ParsePGTime(f.watermark(t)[0])
			lag := time.Since(wm)
			worst = max(worst, lag)
			if !reportEnd.IsZero() {
				worstAfter = max(worstAfter, lag)
				if caughtUp < 0 && lag < 2*time.Second {
					caughtUp = time.Since(reportEnd)
				}
			}
		}
		time.Sleep(time.Second)
	}
	t.Logf("bound %s: report open %s, worst lag %s, worst lag after it ended %s, caught up %s after it ended",
		mode, report, worst.Round(time.Millisecond), worstAfter.Round(time.Millisecond), caughtUp.Round(time.Millisecond))
}

func measureBoundQuery(t *testing.T) {
	f := newFixture(t)
	c := f.config(t, f.db.URL)
	ctx := context.Background()
	src, err := source.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(ctx)
	const n = 500
	start := time.Now()
	for range n {
		if _, err := src.Bound(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("bound query: %s per run (mean of %d)", (time.Since(start) / n).Round(time.Microsecond), n)
}
