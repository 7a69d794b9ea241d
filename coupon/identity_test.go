package coupon_test

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// A campaign killed midway whose sink.table is then edited (another table
// in the same schema, or the same table in another schema) is refused with
// exit 2 naming sink.table and a new sink.campaign: no member is granted a
// second time, nothing says "reconciled" or "done". The state file catches
// the change, and without it the frozen campaign row does (same schema) or
// the campaign found in the other schema's campaigns table does. Restoring
// the config completes the campaign exactly. (Before: the other table was
// "reconciled, done" with most targets never granted; the other schema
// granted every target again.)
func TestEditedSinkTableIsRefused(t *testing.T) {
	for _, tc := range []struct{ name, table string }{
		{"other table", "public.coupon_grants_v2"},
		{"other schema", "promo.coupon_grants"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := pgtest.NewDB(t)
			want := newMembers(t, db)
			db.Exec(t, "CREATE SCHEMA promo")
			yaml := configYAML(db, db, 50)
			cfgPath := writeConfig(t, yaml)
			statePath := filepath.Join(t.TempDir(), "state.db")

			// The last target is held by an open transaction until the
			// kill: the run cannot finish before the test sees a third
			// of the grants (on an idle machine a run took 0.5 s).
			db.Exec(t, grantsDDL)
			blocker := holdGrant(t, db, want[len(want)-1])
			p := bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgPath, "--state", statePath)
			p.Eventually(t, 30*time.Second, "a third of the grants", func() bool {
				return count(t, db, "SELECT count(*) FROM public.coupon_grants") >= int64(len(want))/3
			})
			if r := p.Kill(t); r.Signal != syscall.SIGKILL {
				t.Fatalf("syncd was not killed mid-campaign: %s", r)
			}
			if err := blocker.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			// The killed process's server session may still commit the page
			// it was writing; count once it has gone.
			testutil.Eventually(t, 30*time.Second, "the killed process's sessions to end", func() bool {
				return count(t, db, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'syncd'") == 0
			})
			before := count(t, db, "SELECT count(*) FROM public.coupon_grants")
			if before <= 0 || before >= int64(len(want)) {
				t.Fatalf("killed with %d of %d granted; the test wants a campaign midway", before, len(want))
			}

			edited := writeConfig(t, strings.Replace(yaml, "table: public.coupon_grants", "table: "+tc.table, 1))
			for _, state := range []string{statePath, filepath.Join(t.TempDir(), "fresh.db")} {
				p = bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", edited, "--state", state)
				r := p.Wait(t, time.Minute)
				text := p.Output.String()
				if r.Code != 2 || !strings.Contains(text, "comeback.yaml:") || !strings.Contains(text, "sink.table") ||
					!strings.Contains(text, "start a new campaign with a new sink.campaign id") ||
					strings.Contains(text, "campaign reconciled") || strings.Contains(text, "run done") {
					t.Fatalf("run with sink.table %s (state %s): exit %d, want 2 naming sink.table and a new sink.campaign:\n%s", tc.table, filepath.Base(state), r.Code, text)
				}
				t.Logf("%s", strings.TrimSpace(text))
				if n := count(t, db, "SELECT count(*) FROM "+tc.table); n > 0 {
					t.Fatalf("the refused run granted %d coupons into %s", n, tc.table)
				}
				if n := count(t, db, "SELECT count(*) FROM public.coupon_grants"); n != before {
					t.Fatalf("the refused run changed the grants: %d, was %d", n, before)
				}
			}

			if r := bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgPath, "--state", statePath).Wait(t, time.Minute); r.Code != 0 {
				t.Fatalf("run with the config restored: %s", r)
			}
			checkExact(t, db, want)
		})
	}
}
