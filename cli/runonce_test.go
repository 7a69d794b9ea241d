package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/syncd/syncd/cli"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/pgutil"
)

// TestRunOnceSharesSessions: `run --once` over a pattern of four tables
// opens one source and one sink session for all of it (the expansion, each
// table's check and each table's run take them in turn) instead of four
// per table, and every copy equals its table row by row.
func TestRunOnceSharesSessions(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	const tables = 4
	for i := 1; i <= tables; i++ {
		db.Exec(t, fmt.Sprintf(`CREATE TABLE public.t%d (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, v text);
INSERT INTO public.t%d SELECT g, timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second', 'row ' || g FROM generate_series(1, %d) g`, i, i, 100*i))
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "shop.yaml")
	err := os.WriteFile(cfg, []byte(`name: shop
schedule: "@every 1m"
source:
  dsn: `+db.URL+`
  table: public.t*
  cursor: [updated_at, id]
sink:
  dsn: `+db.URL+`
  table: public.*_copy
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	var ctr pgutil.Counter
	ctx := pgutil.WithCounter(context.Background(), &ctr)
	var stdout, stderr bytes.Buffer
	err = cli.Run(ctx, &cli.Env{Stdout: &stdout, Stderr: &stderr}, []string{"run", "--once", "--config", cfg, "--state", filepath.Join(dir, "state.db")})
	if err != nil {
		t.Fatalf("run --once: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	for i := 1; i <= tables; i++ {
		var missing, extra, n int
		q := fmt.Sprintf(`SELECT (SELECT count(*) FROM (SELECT * FROM public.t%[1]d EXCEPT SELECT * FROM public.t%[1]d_copy) m),
  (SELECT count(*) FROM (SELECT * FROM public.t%[1]d_copy EXCEPT SELECT * FROM public.t%[1]d) e),
  (SELECT count(*) FROM public.t%[1]d_copy)`, i)
		if err := db.Pool.QueryRow(ctx, q).Scan(&missing, &extra, &n); err != nil {
			t.Fatal(err)
		}
		if missing != 0 || extra != 0 || n != 100*i {
			t.Errorf("t%d_copy: %d rows, %d missing, %d extra; want %d, 0, 0", i, n, missing, extra, 100*i)
		}
	}
	if got := ctr.Snapshot().Connects; got != 2 {
		t.Errorf("run --once over %d tables opened %d sessions; want 2 (one source, one sink, shared)", tables, got)
	}
}
