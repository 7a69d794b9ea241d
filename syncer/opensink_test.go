package syncer_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/syncer"
)

// A sink that cannot be opened fails the run with the reason, and the
// state records the failure; it must not crash the run on the way out
// (a nil *sink.Postgres inside a non-nil Sink once did, in the deferred
// "run did not finish" call), with fresh sessions or pooled ones.
func TestSinkThatCannotOpenFailsTheRun(t *testing.T) {
	bothModes(t, testSinkThatCannotOpen)
}

func testSinkThatCannotOpen(t *testing.T, f *fixture) {
	f.db.Exec(t, `INSERT INTO src (id, v) SELECT g, 'v' FROM generate_series(1, 10) g`)
	c := f.config(t, f.db.URL)
	c.Sink.DSN = strings.Replace(f.db.URL, f.db.Name, f.db.Name+"_missing", 1)
	logs := &testutil.Log{}
	_, err := syncer.Run(context.Background(), f.options(c, slog.New(slog.NewJSONHandler(logs, nil))))
	if err == nil || !strings.Contains(err.Error(), f.db.Name+"_missing") {
		t.Fatalf("run with a sink database that does not exist: %v; want an error naming it", err)
	}
	st, _, gerr := f.store.Get(c.Name)
	if gerr != nil || st.LastStatus != "failed" || st.Cursor != nil {
		t.Fatalf("state after the failed run: status %q, cursor %v, %v", st.LastStatus, st.Cursor, gerr)
	}
}
