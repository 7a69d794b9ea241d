package ops_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/ops"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

func parse(t *testing.T, cursor string) *config.Config {
	t.Helper()
	c, err := config.Parse("orders.yaml", []byte("name: orders\nsource:\n  dsn: postgres://h/src\n  table: public.orders\n  cursor: "+cursor+"\nsink:\n  dsn: postgres://h/dst\n  table: public.orders_copy\n  key: [id]\n"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A resync moves the watermark back and binds it to the current settings:
// the status shows where the next run starts, and a watermark computed for
// other settings is no longer refused.
func TestResyncAndStatus(t *testing.T) {
	store, err := watermark.Open(filepath.Join(t.TempDir(), "state.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	old := syncer.IdentityOf(kind.Postgres(), parse(t, "[updated_at, id]"))
	if err := store.Put("orders", watermark.State{Identity: &old, Cursor: []string{"2026-11-30 10:00:00+00", "42"}, TotalWritten: 42}); err != nil {
		t.Fatal(err)
	}
	c := parse(t, "[changed_at, id]")
	st, err := ops.BuildStatus(store, nil, []*config.Config{c})
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Sources[0]; s.Watermark != "2026-11-30T10:00:00.000000Z" || s.RowsWritten != 42 || !strings.Contains(s.IdentityError, "run `syncd resync --source orders --from-start`") {
		t.Fatalf("before the resync: %+v", s)
	}

	from := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	if err := ops.Resync(store, c, from); err != nil {
		t.Fatal(err)
	}
	st, err = ops.BuildStatus(store, nil, []*config.Config{c})
	if err != nil {
		t.Fatal(err)
	}
	s := st.Sources[0]
	if s.Watermark != "" || len(s.Cursor) != 0 || s.ResyncFrom != "2026-11-29T08:00:00Z" || s.IdentityError != "" || s.RowsWritten != 42 {
		t.Fatalf("after the resync: %+v", s)
	}
	st.WithRunning(map[string]syncer.Progress{"orders": {Rows: 7}, "other": {Rows: 1}})
	if st.Sources[0].Running == nil || st.Sources[0].Running.Rows != 7 {
		t.Fatalf("running: %+v", st.Sources[0].Running)
	}
}
