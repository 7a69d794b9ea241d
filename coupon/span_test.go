package coupon_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/syncer"
)

// TestGrantPagesEndAtTheirLastTarget: each grant page (granted on the
// server, no key travels) covers exactly the next sink.grant_page_size
// targets in key order, even where the keys' text order differs from
// their order (999 sorts after 1000 as text): its row count and the
// watermark after it are the size-th target's, and the run reads each
// target once.
func TestGrantPagesEndAtTheirLastTarget(t *testing.T) {
	t.Parallel()
	const size = 997
	db, want, cfg, store := campaignSetup(t, size)
	var rows []int64
	var cursors []string
	res, err := syncer.Run(context.Background(), syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet,
		OnPage: func(p syncer.PageStats) {
			rows = append(rows, p.Rows)
			cursors = append(cursors, strings.Join(p.Cursor, ","))
		}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	checkExact(t, db, want)
	n := int64(len(want))
	if res.Pages != pagesFor(n, size) || res.Rows != n || res.Written != n {
		t.Fatalf("run: %d pages, %d targets read, %d new grants; want %d, %d, %d", res.Pages, res.Rows, res.Written, pagesFor(n, size), n, n)
	}
	for i := range rows {
		end := min((i+1)*size, len(want))
		if wantRows := int64(end - i*size); rows[i] != wantRows || cursors[i] != strconv.FormatInt(want[end-1], 10) {
			t.Fatalf("page %d: %d targets, watermark %s; want %d targets ending at target %d (%d)", i+1, rows[i], cursors[i], wantRows, end, want[end-1])
		}
	}
	if _, cursor := storedCampaign(t, db); !slices.Equal(cursor, []string{strconv.FormatInt(want[len(want)-1], 10)}) {
		t.Fatalf("progress cursor %v; want the last target %d", cursor, want[len(want)-1])
	}
}

// TestGrantPagesDoNotOverlap: each target is inserted by one grant page
// only, also when the pages do not line up with the chunks (the campaign
// froze in chunks of 1,000 and its grant_page_size is now 300, as after a
// change of the file, or with chunks frozen by hand as docs/COUPONS.md
// shows). A BEFORE INSERT trigger on the grants table sees every row a
// page's INSERT tries, also one that ON CONFLICT then skips; a rolled back
// INSERT leaves no trace of its tries.
//
// A page that starts at the previous page's last target instead of after
// it gives nobody a second coupon (the primary key stops it) and changes
// no count, grant or watermark; but its plain INSERT fails on that target,
// and the run applies this and every later page with ON CONFLICT DO
// NOTHING, the slower statement. Only the tries show it.
func TestGrantPagesDoNotOverlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, want, cfg, store := campaignSetup(t, 1000)
	db.Exec(t, grantsDDL+`;
CREATE TABLE public.grant_tries (member_id bigint NOT NULL);
CREATE FUNCTION public.note_grant_try() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO public.grant_tries VALUES (NEW.member_id); RETURN NEW; END$$;
CREATE TRIGGER note_grant_try BEFORE INSERT ON public.coupon_grants FOR EACH ROW EXECUTE FUNCTION public.note_grant_try();`)

	stop := make(chan struct{})
	_, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet, Stop: stop,
		Test: syncer.TestSignals{AfterCommit: func(context.Context, syncer.Commit) error { close(stop); return nil }}})
	if !errors.Is(err, syncer.ErrStopped) {
		t.Fatalf("first run (pages of 1000, stopped after one): err %v; want ErrStopped", err)
	}
	const size = 300
	res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: parseConfig(t, configYAML(db, db, size)), Store: store, Logger: quiet})
	if err != nil {
		t.Fatalf("second run (pages of %d): %v", size, err)
	}
	checkExact(t, db, want)
	rest := int64(len(want) - 1000)
	if res.Pages != pagesFor(rest, size) || res.Rows != rest || res.Written != rest {
		t.Fatalf("second run: %d pages, %d targets read, %d new grants; want %d, %d, %d", res.Pages, res.Rows, res.Written, pagesFor(rest, size), rest, rest)
	}
	if twice := ids(t, db, "SELECT member_id FROM public.grant_tries GROUP BY member_id HAVING count(*) > 1 ORDER BY member_id"); len(twice) > 0 {
		t.Fatalf("%d targets were inserted by two grant pages (e.g. %v); want each by one page: a page starts after the last target of the page before it", len(twice), head(twice))
	}
	if n := count(t, db, "SELECT count(*) FROM public.grant_tries"); n != int64(len(want)) {
		t.Fatalf("the grant pages tried %d inserts; want %d, one per target", n, len(want))
	}
}

// TestGrantPagesDefaultToTheirOwnSize: with neither sink.grant_page_size
// nor source.page_size in the file, a campaign's grant pages are
// config.DefaultGrantPageSize targets, not a table page's 1,000: the 8,000
// targets are one page.
func TestGrantPagesDefaultToTheirOwnSize(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	want := newMembers(t, db)
	yaml := strings.NewReplacer("  grant_page_size: 50\n", "", "  page_size: 50\n", "").Replace(configYAML(db, db, 50))
	cfg := parseConfig(t, yaml)
	if cfg.Source.PageSize != config.DefaultPageSize || cfg.Sink.GrantPageSize != config.DefaultGrantPageSize {
		t.Fatalf("page_size %d, grant_page_size %d; want %d and %d", cfg.Source.PageSize, cfg.Sink.GrantPageSize, config.DefaultPageSize, config.DefaultGrantPageSize)
	}
	res, err := syncer.Run(context.Background(), syncer.Options{Kinds: kinds, Config: cfg, Store: openStore(t), Logger: quiet})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	checkExact(t, db, want)
	if n := int64(len(want)); res.Pages != 1 || res.Rows != n || res.Written != n {
		t.Fatalf("run: %d pages, %d targets read, %d new grants; want 1, %d, %d", res.Pages, res.Rows, res.Written, n, n)
	}
}

// TestKillInsideAGrantPage kills the real binary (SIGKILL) while its
// second grant page's INSERT ... SELECT runs on the server (held there by
// another transaction that inserted one of that page's grants and has not
// committed), then lets the INSERT finish: the killed run's page never
// commits (no COMMIT arrives), the grants are exactly the first page's, the
// progress cursor is the first page's last target, and a re-run grants
// every target once.
func TestKillInsideAGrantPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const size = 1000
	db := pgtest.NewDB(t)
	want := newMembers(t, db)
	cfgPath := writeConfig(t, configYAML(db, db, size))
	statePath := filepath.Join(t.TempDir(), "state.db")

	// The grants table as the run would create it, with one key of page 2
	// inserted by a transaction that stays open.
	db.Exec(t, grantsDDL)
	held := want[size+size/2] // inside page 2
	blocker := holdGrant(t, db, held)

	p := bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgPath, "--state", statePath)
	var pid int
	p.Eventually(t, 60*time.Second, fmt.Sprintf("the run's second grant page waiting on key %d", held), func() bool {
		err := db.Pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
  AND query LIKE 'INSERT INTO %' AND query LIKE '%coupon_grants_target_chunks%'`).Scan(&pid)
		if err != nil && err != pgx.ErrNoRows {
			t.Fatal(err)
		}
		return pid != 0
	})
	if r := p.Kill(t); r.Signal != syscall.SIGKILL {
		t.Fatalf("syncd was not killed inside the page: %s", r)
	}
	// The page's INSERT goes on once the blocker is gone; the session then
	// finds its client gone and rolls the page back.
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, fmt.Sprintf("the killed run's session %d to end", pid), func() bool {
		var gone bool
		if err := db.Pool.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&gone); err != nil {
			t.Fatal(err)
		}
		return gone
	})
	checkExact(t, db, want[:size])
	if _, cursor := storedCampaign(t, db); !slices.Equal(cursor, []string{fmt.Sprint(want[size-1])}) {
		t.Fatalf("progress cursor %v after the kill; want the first page's last target %d", cursor, want[size-1])
	}

	p = bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgPath, "--state", statePath)
	if r := p.Wait(t, time.Minute); r.Code != 0 {
		t.Fatalf("re-run after the kill: %s", r)
	}
	checkExact(t, db, want)
	if got := newGrants(p.Output.String()); got != strconv.Itoa(len(want)-size) {
		t.Fatalf("re-run made %s new grants; want %d (the targets after the first page)", got, len(want)-size)
	}
}
