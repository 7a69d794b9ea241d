package reconcile_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/reconcile"
	"github.com/syncd/syncd/watermark"
)

// benchRows is the size of the benchmark tables (SYNCD_BENCH_ROWS overrides).
func benchRows() int {
	if n, err := strconv.Atoi(os.Getenv("SYNCD_BENCH_ROWS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

const benchTable = `
CREATE TABLE public.orders (
  id bigint PRIMARY KEY, code text NOT NULL UNIQUE, updated_at timestamptz NOT NULL,
  customer text, amount numeric(12,2), status text, payload jsonb, created date
);
INSERT INTO public.orders
SELECT g, 'ord-' || md5(g::text), '2026-01-01'::timestamptz + g * interval '1 ms',
  'customer ' || (g %% 9973), (g %% 100000) / 100.0, CASE WHEN g %% 3 = 0 THEN 'paid' ELSE 'open' END,
  jsonb_build_object('items', g %% 7, 'note', 'n' || g), '2025-01-01'::date + (g %% 365)
FROM generate_series(1, %d) g;
ANALYZE public.orders;
`

// BenchmarkReconcile compares two 1,000,000-row tables in two databases
// with 10 scattered differences (3 missing, 3 extra, 4 changed), by the
// integer key and by a text key (hash line), and a naive full compare that
// streams both tables. It runs only with -bench:
//
//	go test -run '^$' -bench Reconcile -benchtime 1x ./reconcile/
func BenchmarkReconcile(b *testing.B) {
	n := benchRows()
	src, dst := pgtest.NewDB(b), pgtest.NewDB(b)
	ctx := context.Background()
	src.Exec(b, fmt.Sprintf(benchTable, n))
	dst.Exec(b, fmt.Sprintf(benchTable, n))
	// Scattered differences, at the same relative places whatever n.
	at := func(id int) string { return fmt.Sprint(max(1, id*n/1_000_000)) }
	dst.Exec(b, "DELETE FROM public.orders WHERE id IN ("+at(17)+", "+at(333333)+", "+at(999001)+")") // missing
	dst.Exec(b, fmt.Sprintf("INSERT INTO public.orders (id, code, updated_at) VALUES (%d, 'x1', '2026-01-01'), (%d, 'x2', '2026-01-01')", 2*n+1, 2*n+2))
	src.Exec(b, "DELETE FROM public.orders WHERE id = "+at(500000)) // a hard delete: extra
	dst.Exec(b, "UPDATE public.orders SET amount = amount + 0.01 WHERE id IN ("+at(42)+", "+at(123457)+")")
	dst.Exec(b, "UPDATE public.orders SET payload = payload || '{\"note\": \"x\"}' WHERE id = "+at(654321))
	dst.Exec(b, "UPDATE public.orders SET updated_at = updated_at + interval '1 microsecond' WHERE id = "+at(876543))
	dst.Exec(b, "ANALYZE public.orders")
	dir := b.TempDir()
	state := filepath.Join(dir, "state.db")
	store, err := watermark.Open(state, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	// The watermark past every row, as after a sync (in UTC text as the
	// source session prints it).
	if err := store.Put("orders", watermark.State{Cursor: []string{"2100-01-01 00:00:00+00", "0"}}); err != nil {
		b.Fatal(err)
	}

	for _, key := range []string{"id", "code"} {
		b.Run("key="+key, func(b *testing.B) {
			file := filepath.Join(dir, key+".yaml")
			yaml := fmt.Sprintf("name: orders\nsource:\n  dsn: %s\n  table: public.orders\n  cursor: [updated_at, id]\nsink:\n  dsn: %s\n  table: public.orders\n  key: [%s]\n", src.URL, dst.URL, key)
			if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
				b.Fatal(err)
			}
			cfg, err := config.LoadFile(file)
			if err != nil {
				b.Fatal(err)
			}
			var rep *reconcile.Report
			for b.Loop() {
				rep, err = reconcile.Run(ctx, cfg, store, reconcile.Options{Logger: quietLogger()})
				if err != nil {
					b.Fatal(err)
				}
			}
			if rep.Missing != 3 || rep.Extra != 3 || rep.Changed != 4 {
				b.Fatalf("found %d missing, %d extra, %d changed (%+v); want 3, 3, 4", rep.Missing, rep.Extra, rep.Changed, rep.Keys)
			}
			if key == "id" {
				assertKeys(b, "missing", rep.Keys.Missing, at(17), at(333333), at(999001))
				assertKeys(b, "extra", rep.Keys.Extra, at(500000), fmt.Sprint(2*n+1), fmt.Sprint(2*n+2))
				assertKeys(b, "changed", rep.Keys.Changed, at(42), at(123457), at(654321), at(876543))
			}
			pct := 100 * float64(rep.RowsFetched) / float64(n)
			if n >= 1_000_000 && pct >= 1 {
				b.Fatalf("fetched %d rows, %.2f%% of %d", rep.RowsFetched, pct, n)
			}
			b.ReportMetric(float64(rep.RowsFetched), "rows_fetched")
			b.ReportMetric(pct, "%fetched")
			b.ReportMetric(float64(rep.ChecksumQueries), "checksum_queries")
			b.ReportMetric(float64(rep.HashesRead), "hashes_read")
			b.Logf("%d rows, key %s: %d missing, %d extra, %d changed; fetched %d whole rows (%.3f%%), %d (key, hash) pairs, %d checksum queries, %d ms",
				n, key, rep.Missing, rep.Extra, rep.Changed, rep.RowsFetched, pct, rep.HashesRead, rep.ChecksumQueries, rep.DurationMS)
		})
	}

	b.Run("naive-full-compare", func(b *testing.B) {
		var diffs, streamed int64
		for b.Loop() {
			diffs, streamed = naiveCompare(ctx, b, src, dst)
		}
		if diffs != 10 {
			b.Fatalf("naive compare found %d differences, want 10", diffs)
		}
		b.ReportMetric(float64(streamed), "rows_fetched")
		b.Logf("naive: streamed %d rows, %d differences", streamed, diffs)
	})
}

// naiveCompare streams both tables in key order and merges them.
func naiveCompare(ctx context.Context, b *testing.B, src, dst *pgtest.DB) (diffs, streamed int64) {
	type rec struct {
		id  int64
		row string
	}
	stream := func(db *pgtest.DB, out chan<- rec, errc chan<- error) {
		defer close(out)
		conn, err := pgx.Connect(ctx, db.URL)
		if err != nil {
			errc <- err
			return
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, "SELECT id, o::text FROM public.orders o ORDER BY id")
		if err != nil {
			errc <- err
			return
		}
		var r rec
		_, err = pgx.ForEachRow(rows, []any{&r.id, &r.row}, func() error {
			out <- r
			return nil
		})
		errc <- err
	}
	a, c := make(chan rec, 1024), make(chan rec, 1024)
	errc := make(chan error, 2)
	go stream(src, a, errc)
	go stream(dst, c, errc)
	x, okx := <-a
	y, oky := <-c
	for okx || oky {
		switch {
		case okx && (!oky || x.id < y.id):
			diffs++
			streamed++
			x, okx = <-a
		case oky && (!okx || y.id < x.id):
			diffs++
			streamed++
			y, oky = <-c
		default:
			if x.row != y.row {
				diffs++
			}
			streamed += 2
			x, okx = <-a
			y, oky = <-c
		}
	}
	for range 2 {
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
	return diffs, streamed
}
