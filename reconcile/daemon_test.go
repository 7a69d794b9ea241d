package reconcile_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testutil"
)

// TestDaemonScheduledRepair runs the real daemon with
// reconcile: {schedule: "@every 1s", repair: true}: it repairs a changed,
// a missing and a hard-deleted row on its own.
func TestDaemonScheduledRepair(t *testing.T) {
	bin := buildBinary(t)
	f := newFixture(t, 500, "reconcile:\n  schedule: \"@every 1s\"\n  repair: true")
	f.closeStore(t)
	f.dst.Exec(t, `UPDATE public.items_copy SET t = 'wrong' WHERE id = 5`)
	f.dst.Exec(t, `DELETE FROM public.items_copy WHERE id = 6`)
	f.src.Exec(t, `DELETE FROM public.items WHERE id = 7`)

	d := bin.Start(t, nil, "run", "--config", f.cfgFile, "--state", f.stateFile, "--listen", "")
	d.Eventually(t, 30*time.Second, "the daemon's scheduled reconcile to repair the copy", func() bool {
		var n int
		err := f.dst.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM public.items_copy WHERE (id = 5 AND t = 'wrong') OR id = 7`).Scan(&n)
		var missing bool
		if err == nil {
			err = f.dst.Pool.QueryRow(context.Background(), `SELECT NOT EXISTS (SELECT 1 FROM public.items_copy WHERE id = 6)`).Scan(&missing)
		}
		if err != nil {
			t.Fatal(err)
		}
		return n == 0 && !missing
	})
	f.assertSameRows(t)
	d.Eventually(t, 30*time.Second, "a scheduled reconcile logged as done", func() bool {
		_, ok := d.Output.FindFunc(func(e testutil.Entry) bool { return strings.HasPrefix(e.Msg(), "scheduled reconcile done") })
		return ok
	})
	if r := d.Stop(t, 30*time.Second); r.Code != 0 {
		t.Errorf("daemon exit after SIGTERM: %s", r)
	}
}
