package main_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// A timestamp without time zone cursor whose writers stamp local time (the
// database's TimeZone is behind UTC) cannot be protected by the read bound,
// which takes the values as UTC: validate and run say so, naming the
// column, the zone and the fix. A timestamptz cursor is not affected.
func TestLocalTimeCursorWarned(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, fmt.Sprintf(`ALTER DATABASE %q SET timezone = 'America/New_York'`, src.Name))
	src.Exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamp NOT NULL, name text)`)
	src.Exec(t, `CREATE INDEX ON orders (updated_at, id)`)
	src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-01 09:00:00'::timestamp + g * interval '1 second', 'o' || g FROM generate_series(1, 100) g`)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, ""))
	env := []string{"SYNCD_STATE=" + filepath.Join(dir, "state.db")}
	want := `source.cursor's first column "updated_at" of public.orders is timestamp without time zone and writers of the source get TimeZone America/New_York`

	r := bin.Run(t, env, "validate", "--config", cfg)
	if r.Code != 0 || !strings.Contains(r.Stdout, "orders: warning: "+want) || !strings.Contains(r.Stdout, "make the column timestamptz") {
		t.Fatalf("validate exited %d without the local-time warning:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	r = bin.Run(t, env, "run", "--once", "--config", cfg)
	logged := "is timestamp without time zone and writers of the source get TimeZone America/New_York"
	if r.Code != 0 || strings.Count(r.Stderr, logged) != 1 {
		t.Fatalf("run --once exited %d; want exit 0 and the warning once:\n%s", r.Code, r.Stderr)
	}
	if got, want := rowsText(t, dst, "orders_copy"), rowsText(t, src, "orders"); got != want {
		t.Fatalf("copy differs from the source:\ncopy:\n%s\nsource:\n%s", got, want)
	}

	// The same database with a timestamptz cursor: nothing to warn about.
	src.Exec(t, `CREATE TABLE orders_tz (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text)`)
	src.Exec(t, `CREATE INDEX ON orders_tz (updated_at, id)`)
	cfg = writeConfig(t, dir, "tz.yaml", strings.NewReplacer("name: orders\n", "name: orders_tz\n", "public.orders\n", "public.orders_tz\n", "public.orders_copy", "public.orders_tz_copy").Replace(orders(t, src, dst, "")))
	r = bin.Run(t, env, "validate", "--config", cfg)
	if r.Code != 0 || strings.Contains(r.Stdout, "TimeZone") {
		t.Fatalf("validate of a timestamptz cursor exited %d or warned about TimeZone:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}
