package main_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/watermark"
)

// readOnly sets default_transaction_read_only for db's new sessions, as an
// administrator would for a database under maintenance (a hot standby
// refuses writes with the same SQLSTATE, 25006).
func readOnly(t *testing.T, db *pgtest.DB, on bool) {
	t.Helper()
	db.Exec(t, fmt.Sprintf("ALTER DATABASE %q SET default_transaction_read_only = %t", db.Name, on))
}

// A sink that refuses writes (default_transaction_read_only on for its
// database) fails the run with one line that names the sink's DSN key, its
// file and line, and what to do, before the copy exists and after; the
// copy and the watermark are left as they were, and once the sink takes
// writes again the next run brings the copy level with the source.
func TestReadOnlySinkSaysWhatToDo(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, ""))
	state := filepath.Join(dir, "state.db")
	want := func(what string, r testutil.Result) {
		t.Helper()
		line := "the sink database is read-only for syncd"
		where := "sink.dsn (" + cfg + ":"
		if r.Code != 1 || !strings.Contains(r.Stderr, line) || !strings.Contains(r.Stderr, where) || !strings.Contains(r.Stderr, "default_transaction_read_only = off") {
			t.Fatalf("%s: want exit 1 and a line saying %q naming %s; got %s", what, line, where, r)
		}
	}

	readOnly(t, dst, true)
	r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state)
	want("first run into a read-only sink", r)
	if n := count(t, dst, "SELECT count(*) FROM pg_class WHERE relname = 'orders_copy'"); n != 0 {
		t.Fatalf("the read-only sink has %d tables named orders_copy, want none", n)
	}

	readOnly(t, dst, false)
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("run once the sink takes writes: %s", r)
	}
	cursorNow := func() []string {
		t.Helper()
		st, _, err := watermark.ReadState(state, "orders", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return st.Cursor
	}
	before, copyBefore := cursorNow(), rowsText(t, dst, "orders_copy")

	src.Exec(t, `UPDATE orders SET updated_at = now(), name = name || '!' WHERE id % 7 = 0`)
	src.Exec(t, `INSERT INTO orders SELECT g, now(), 'n' || g FROM generate_series(1001, 1100) g`)
	readOnly(t, dst, true)
	r = bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state)
	want("a run with new rows into a read-only sink", r)
	if got := cursorNow(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("the watermark moved to %v on a run whose writes were refused, want %v", got, before)
	}
	if got := rowsText(t, dst, "orders_copy"); got != copyBefore {
		t.Fatalf("the copy changed on a run whose writes were refused")
	}

	readOnly(t, dst, false)
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("run once the sink takes writes again: %s", r)
	}
	if s, c := rowsText(t, src, "orders"), rowsText(t, dst, "orders_copy"); s != c {
		t.Fatalf("the copy differs from the source after the sink took writes again")
	}
	if n := count(t, dst, "SELECT count(*) FROM orders_copy"); n != 1100 {
		t.Fatalf("the copy has %d rows, want 1100", n)
	}
}
