package syncer_test

import (
	"errors"
	"testing"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/sourceerr"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// A watermark computed for other settings is refused with an error the
// callers can tell apart by type: a config error (exit 2) at the changed
// key that is also a ResyncNeeded of the source, whose text ends with the
// resync that resets it.
func TestCheckIdentityTypedError(t *testing.T) {
	parse := func(cursor string) *config.Config {
		t.Helper()
		c, err := config.Parse("orders.yaml", []byte("name: orders\nsource:\n  dsn: postgres://h/src\n  table: public.orders\n  cursor: "+cursor+"\nsink:\n  dsn: postgres://h/dst\n  table: public.orders_copy\n  key: [id]\n"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	old := syncer.IdentityOf(kind.Postgres(), parse("[updated_at, id]"))
	st := watermark.State{Identity: &old, Cursor: []string{"2026-01-01 00:00:00+00", "7"}}
	err := syncer.CheckIdentity(kind.Postgres(), parse("[changed_at, id]"), st, "/var/lib/syncd/syncd.db")
	var rn *sourceerr.ResyncNeeded
	if !errors.As(err, &rn) || rn.Source != "orders" || !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("CheckIdentity = %v; want a config error that is a ResyncNeeded of orders", err)
	}
	want := "orders.yaml:5: source.cursor: the watermark of source orders in /var/lib/syncd/syncd.db was computed for other settings (source.cursor \"updated_at,id\" → \"changed_at,id\"); resuming from it would skip every row before it: run `syncd resync --source orders --from-start` (or --from TIME) to start it afresh with these settings, or restore the old ones"
	if err.Error() != want {
		t.Errorf("message:\n got %s\nwant %s", err, want)
	}
}
