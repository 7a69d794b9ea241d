package main_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/testutil"
)

// A transaction left open on the source holds `syncd run --once` below its
// start: the run says so on stderr with the pid, `syncd status` names it,
// and the first run after it ends brings the copy level with the source.
func TestBinaryReportsHeldBackBound(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, ""))
	env := []string{"SYNCD_STATE=" + filepath.Join(dir, "state.db")}

	ctx := context.Background()
	open, err := pgx.Connect(ctx, src.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close(ctx)
	var pid int32
	if _, err := open.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if err := open.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	src.Exec(t, `INSERT INTO orders SELECT g, now(), 'after the report began' FROM generate_series(1001, 1010) g`)
	// The run names a holder once it has been open a second
	// (syncer.HoldWarnAfter) by the source's clock: wait until it has.
	testutil.Eventually(t, time.Minute, "the open transaction to be a second old", func() bool {
		var old bool
		if err := src.Pool.QueryRow(ctx, `SELECT clock_timestamp() - xact_start > interval '1.1 s' FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&old); err != nil {
			t.Fatal(err)
		}
		return old
	})

	r := bin.Run(t, env, "run", "--config", cfg, "--once")
	if r.Code != 0 {
		t.Fatalf("run --once exited %d: %s", r.Code, r.Stderr)
	}
	reported := false
	for _, e := range testutil.ParseLines(r.Stderr) {
		reported = reported || strings.HasPrefix(e.Msg(), "bound held back by a transaction open since") && e.Match("", "pid", pid)
	}
	if !reported {
		t.Fatalf("run --once does not report the held-back bound with pid %d:\n%s", pid, r.Stderr)
	}
	if got := count(t, dst, "SELECT count(*) FROM orders_copy"); got != 1000 {
		t.Fatalf("copy has %d rows while held, want the 1000 rows older than the open transaction", got)
	}
	r = bin.Run(t, env, "status", "--config", cfg)
	if r.Code != 0 || !strings.Contains(r.Stdout, fmt.Sprintf("orders: bound held back by pid %d", pid)) {
		t.Fatalf("status exited %d and does not name pid %d:\n%s%s", r.Code, pid, r.Stdout, r.Stderr)
	}
	r = bin.Run(t, env, "status", "--config", cfg, "--json")
	if !strings.Contains(r.Stdout, fmt.Sprintf(`"bound_holder_pid": %d`, pid)) || !strings.Contains(r.Stdout, `"newest_row_age_seconds"`) {
		t.Fatalf("status --json lacks the holder and the newest row age:\n%s", r.Stdout)
	}

	if _, err := open.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if r = bin.Run(t, env, "run", "--config", cfg, "--once"); r.Code != 0 {
		t.Fatalf("run after the transaction ended exited %d: %s", r.Code, r.Stderr)
	}
	if got, want := rowsText(t, dst, "orders_copy"), rowsText(t, src, "orders"); got != want {
		t.Fatal("copy differs from the source after the transaction ended")
	}
	if r = bin.Run(t, env, "status", "--config", cfg); strings.Contains(r.Stdout, "held back") {
		t.Fatalf("status still names a holder:\n%s", r.Stdout)
	}
}
