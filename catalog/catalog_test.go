package catalog_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func connect(t *testing.T, db *pgtest.DB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Processes that start at once on a sink without a catalog all end with
// one catalog, and none fails.
func TestEnsureFromManyProcessesAtOnce(t *testing.T) {
	db := pgtest.NewDB(t)
	conns := make([]*pgx.Conn, 6)
	for i := range conns {
		conns[i] = connect(t, db)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(conns))
	for i, c := range conns {
		wg.Go(func() { errs[i] = catalog.Ensure(context.Background(), c) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
	}
	var v int
	if err := conns[0].QueryRow(context.Background(), "SELECT version FROM syncd.catalog_version").Scan(&v); err != nil || v != catalog.Version {
		t.Fatalf("catalog version %d (%v), want %d", v, err, catalog.Version)
	}
}

// A catalog written by a newer syncd is refused, never rewritten.
func TestNewerCatalogRefused(t *testing.T) {
	db := pgtest.NewDB(t)
	conn := connect(t, db)
	if err := catalog.Ensure(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, "UPDATE syncd.catalog_version SET version = 99")
	if err := catalog.Ensure(context.Background(), conn); !errors.Is(err, catalog.ErrNewer) {
		t.Fatalf("Ensure on a newer catalog: %v, want ErrNewer", err)
	}
	// A catalog whose version row was deleted names the statement that
	// restores it.
	db.Exec(t, "DELETE FROM syncd.catalog_version")
	if err := catalog.Ensure(context.Background(), conn); err == nil || !strings.Contains(err.Error(), "INSERT INTO syncd.catalog_version (version) VALUES (2)") {
		t.Fatalf("Ensure on a catalog without its version: %v", err)
	}
}

// A page's mark travels as literals in the page's own statement: cursor
// values with quotes and backslashes are recorded exactly, whatever
// standard_conforming_strings says.
func TestMarkRecordsCursorExactly(t *testing.T) {
	db := pgtest.NewDB(t)
	conn := connect(t, db)
	ctx := context.Background()
	if err := catalog.Ensure(ctx, conn); err != nil {
		t.Fatal(err)
	}
	copyName := `public."it's\copy"`
	if _, _, err := catalog.Claim(ctx, conn, catalog.Record{Copy: copyName, SourceName: "s", Source: catalog.Source{Database: "d", Table: "t"}}); err != nil {
		t.Fatal(err)
	}
	mark := []string{`it's a \ back'slash`, "2026-12-01 00:00:00.000001+00", "1"}
	for _, scs := range []string{"on", "off"} {
		if _, err := conn.Exec(ctx, "SET standard_conforming_strings = "+scs); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, catalog.MarkSQL(copyName, mark, 7, nil)); err != nil {
			t.Fatalf("standard_conforming_strings %s: %v", scs, err)
		}
		rec, ok, err := catalog.Read(ctx, conn, copyName)
		if err != nil || !ok || !slices.Equal(rec.Cursor, mark) {
			t.Fatalf("standard_conforming_strings %s: recorded %q (%v, %v), want %q", scs, rec.Cursor, ok, err, mark)
		}
	}
	if rec, _, _ := catalog.Read(ctx, conn, copyName); rec.Pages != 2 || rec.Rows != 14 {
		t.Fatalf("pages %d rows %d, want 2 and 14", rec.Pages, rec.Rows)
	}
	if gone, err := catalog.Release(ctx, conn, copyName); err != nil || !gone {
		t.Fatalf("release: %v %v", gone, err)
	}
	if _, ok, _ := catalog.Read(ctx, conn, copyName); ok {
		t.Fatal("record still there after its release")
	}
}
