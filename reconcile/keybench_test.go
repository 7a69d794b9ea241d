package reconcile_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/reconcile"
	"github.com/syncd/syncd/watermark"
)

// keyBenchTables are the tables of BenchmarkKeyCheck, one per kind of key:
// each %[1]d is the row count. Row g's key is a function of g alone, so
// both databases hold the same rows.
var keyBenchTables = map[string]struct{ ddl, key string }{
	"uuid": {`CREATE TABLE public.kb (k uuid PRIMARY KEY, g int8 NOT NULL UNIQUE, updated_at timestamptz NOT NULL, customer text, amount numeric(12,2), payload jsonb);
INSERT INTO public.kb SELECT md5(g::text)::uuid, g, '2026-01-01'::timestamptz + g * interval '1 ms', 'customer ' || (g %% 9973), (g %% 100000) / 100.0, jsonb_build_object('items', g %% 7, 'note', 'n' || g) FROM generate_series(1, %[1]d) g`, "[k]"},
	"text": {`CREATE TABLE public.kb (k text PRIMARY KEY, g int8 NOT NULL UNIQUE, updated_at timestamptz NOT NULL, customer text, amount numeric(12,2), payload jsonb);
INSERT INTO public.kb SELECT 'ord-' || md5(g::text), g, '2026-01-01'::timestamptz + g * interval '1 ms', 'customer ' || (g %% 9973), (g %% 100000) / 100.0, jsonb_build_object('items', g %% 7, 'note', 'n' || g) FROM generate_series(1, %[1]d) g`, "[k]"},
	"int-int": {`CREATE TABLE public.kb (a int4 NOT NULL, b int4 NOT NULL, g int8 NOT NULL UNIQUE, updated_at timestamptz NOT NULL, customer text, amount numeric(12,2), payload jsonb, PRIMARY KEY (a, b));
INSERT INTO public.kb SELECT g %% 1000, g / 1000, g, '2026-01-01'::timestamptz + g * interval '1 ms', 'customer ' || (g %% 9973), (g %% 100000) / 100.0, jsonb_build_object('items', g %% 7, 'note', 'n' || g) FROM generate_series(1, %[1]d) g`, "[a, b]"},
}

// BenchmarkKeyCheck measures the key check (Keys) beside the full
// reconcile (Run) of the same two tables of 1,000,000 rows (SYNCD_BENCH_ROWS)
// whose source lost 0.1% of its rows (g %% 1000 = 7, scattered), for a key
// that is not a single integer: uuid, text, and (int4, int4). Both tables
// are vacuumed, as the syncd-bench `keys` row does for the integer key; the
// two are run alternately, 3 times each, and the median ratio reported.
// SYNCD_BENCH_KEYS picks the kinds (default all). It runs only with -bench:
//
//	go test -run '^$' -bench KeyCheck -benchtime 1x -timeout 30m ./reconcile/
func BenchmarkKeyCheck(b *testing.B) {
	n := benchRows()
	kinds := []string{"uuid", "text", "int-int"}
	if s := os.Getenv("SYNCD_BENCH_KEYS"); s != "" {
		kinds = []string{s}
	}
	ctx := context.Background()
	for _, kind := range kinds {
		b.Run("key="+kind, func(b *testing.B) {
			tb := keyBenchTables[kind]
			src, dst := pgtest.NewDB(b), pgtest.NewDB(b)
			src.Exec(b, fmt.Sprintf(tb.ddl, n))
			dst.Exec(b, fmt.Sprintf(tb.ddl, n))
			src.Exec(b, "DELETE FROM public.kb WHERE g % 1000 = 7")
			src.Exec(b, "VACUUM ANALYZE public.kb")
			dst.Exec(b, "VACUUM ANALYZE public.kb")
			deleted := int64(0)
			for g := 1; g <= n; g++ {
				if g%1000 == 7 {
					deleted++
				}
			}
			dir := b.TempDir()
			store, err := watermark.Open(filepath.Join(dir, "state.db"), 0)
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			if err := store.Put("kb", watermark.State{Cursor: []string{"2100-01-01 00:00:00+00", "0"}}); err != nil {
				b.Fatal(err)
			}
			file := filepath.Join(dir, "kb.yaml")
			yaml := fmt.Sprintf("name: kb\nsource:\n  dsn: %s\n  table: public.kb\n  cursor: [updated_at, g]\nsink:\n  dsn: %s\n  table: public.kb\n  key: %s\n", src.URL, dst.URL, tb.key)
			if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
				b.Fatal(err)
			}
			cfg, err := config.LoadFile(file)
			if err != nil {
				b.Fatal(err)
			}
			o := reconcile.Options{Logger: quietLogger()}
			var checks, fulls []time.Duration
			for b.Loop() {
				for range 3 {
					start := time.Now()
					rep, err := reconcile.Keys(ctx, cfg, store, o)
					if err != nil {
						b.Fatal(err)
					}
					checks = append(checks, time.Since(start))
					if rep.Extra != deleted || rep.Missing != 0 {
						b.Fatalf("key check found %d extra, %d missing; want the %d deleted rows extra, nothing else", rep.Extra, rep.Missing, deleted)
					}
					start = time.Now()
					rep, err = reconcile.Run(ctx, cfg, store, o)
					if err != nil {
						b.Fatal(err)
					}
					fulls = append(fulls, time.Since(start))
					if rep.Extra != deleted || rep.Missing+rep.Changed != 0 {
						b.Fatalf("full reconcile found %d extra, %d missing, %d changed; want the %d deleted rows extra", rep.Extra, rep.Missing, rep.Changed, deleted)
					}
				}
			}
			med := func(d []time.Duration) time.Duration {
				s := slices.Clone(d)
				slices.Sort(s)
				return s[len(s)/2]
			}
			ratio := med(checks).Seconds() / med(fulls).Seconds()
			b.ReportMetric(ratio, "ratio")
			b.Logf("%d rows, key %s (%s): key check %v, full reconcile %v, ratio %.2f (median of 3)", n, kind, tb.key, checks, fulls, ratio)
		})
	}
}
