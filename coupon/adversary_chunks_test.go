package coupon_test

// Attacks on the target chunks (coupon/freeze.go, grants.go): frozen
// targets edited by hand, key types whose text form is tricky, grant page
// sizes changed between runs, kills during the freeze, runs at once, and
// campaigns frozen in the layout before chunks.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/coupon"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

const advChunks = "public.coupon_grants_target_chunks"

// freezeOnly runs cfg's campaign until it is frozen and stops it before
// the first grant page.
func freezeOnly(t *testing.T, cfg *config.Config, store *watermark.Store) {
	t.Helper()
	stop := make(chan struct{})
	close(stop)
	if _, err := syncer.Run(context.Background(), syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet, Stop: stop}); !errors.Is(err, syncer.ErrStopped) {
		t.Fatalf("freeze: %v; want ErrStopped", err)
	}
}

// campaignStatus is the status column of the campaign's row.
func campaignStatus(t *testing.T, db *pgtest.DB) string {
	t.Helper()
	return keyRows(t, db, "SELECT status FROM public.syncd_campaigns WHERE campaign_id = '"+campaignID+"'")[0]
}

// TestAdvHandEditedChunksFailLoudly: a frozen campaign whose chunks were
// edited by hand so that they no longer hold the frozen targets in order
// (an element gone or added while n stayed, a chunk moved, a key copied
// over another) must not end in success, and the error must be one line
// naming the chunks table.
func TestAdvHandEditedChunksFailLoudly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		edit   string
		rerun  int  // grant_page_size of the run after the edit
		none   bool // the run must fail before any grant
		midRun bool // edited after the run's first page, not before the run
	}{
		// Element 100 of the chunk at 500 removed: position 1000 has no
		// key. Pages of 500 end on it, pages of 300 never do.
		{"element removed, page ends on the hole", "UPDATE " + advChunks + " SET key_1 = key_1[1:99] || key_1[101:] WHERE first_pos = 500", 500, true, false},
		{"element removed, no page ends on the hole", "UPDATE " + advChunks + " SET key_1 = key_1[1:99] || key_1[101:] WHERE first_pos = 500", 300, true, false},
		{"element added, n kept", "UPDATE " + advChunks + " SET key_1 = key_1 || ARRAY['99999999'] WHERE first_pos = 500", 500, true, false},
		{"n and targets lowered with an element removed", "UPDATE " + advChunks + " SET key_1 = key_1[2:], n = n - 1 WHERE first_pos = 500; UPDATE public.syncd_campaigns SET targets = targets - 1", 500, true, false},
		{"chunk moved by one position", "UPDATE " + advChunks + " SET first_pos = first_pos + 1 WHERE first_pos = 500", 500, true, false},
		{"a key copied over another chunk's", "UPDATE " + advChunks + " SET key_1[1] = (SELECT key_1[1] FROM " + advChunks + " WHERE first_pos = 0) WHERE first_pos = 500", 500, false, false},
		{"element removed while the run grants", "UPDATE " + advChunks + " SET key_1 = key_1[1:99] || key_1[101:] WHERE first_pos = 500", 500, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, _, cfg, store := campaignSetup(t, 500)
			o := syncer.Options{Kinds: kinds, Config: parseConfig(t, configYAML(db, db, tc.rerun)), Store: store, Logger: quiet}
			if tc.midRun {
				o.Test.AfterCommit = func(_ context.Context, at syncer.Commit) error {
					if at.Page == 1 {
						db.Exec(t, tc.edit)
					}
					return nil
				}
			} else {
				freezeOnly(t, cfg, store)
				db.Exec(t, tc.edit)
			}
			_, err := syncer.Run(ctx, o)
			if err == nil || !strings.Contains(err.Error(), advChunks) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("run after the chunks were edited (%s): err %v; want a one-line error naming %s", tc.edit, err, advChunks)
			}
			if s := campaignStatus(t, db); s == "done" {
				t.Fatalf("campaign status %q after edited chunks", s)
			}
			if n := count(t, db, "SELECT count(*) FROM public.coupon_grants"); tc.none && n != 0 {
				t.Fatalf("%d grants made from edited chunks; want 0 (err %v)", n, err)
			}
			t.Logf("error: %v", err)
		})
	}
}

// advKeyType is a source table keyed by one tricky type (or two columns).
type advKeyType struct {
	name   string
	cols   string // column definitions of the key, without NOT NULL
	key    []string
	values string // a SQL array or set of the key values (one row each)
}

var advKeyTypes = []advKeyType{
	{"bigint", "k bigint", []string{"k"}, "unnest('{-9223372036854775808,-5,-1,0,1,9,10,100,9223372036854775807}'::bigint[])"},
	{"smallint", "k smallint", []string{"k"}, "unnest('{-32768,-1,0,7,10,100,99,32767}'::smallint[])"},
	{"numeric", "k numeric", []string{"k"}, "unnest('{1.50,1.5000001,-0.10,0.000,1e20,NaN,Infinity,-Infinity,0.000001,12345678901234567890.12345678901234567890}'::numeric[])"},
	{"numeric_12_2", "k numeric(12,2)", []string{"k"}, "unnest('{1.50,2.00,-0.10,9999999999.99,0,10,9.99,-9999999999.99}'::numeric(12,2)[])"},
	{"timestamptz", "k timestamptz", []string{"k"}, "unnest(ARRAY['2026-01-02 03:04:05.123456+00', '2026-02-01 03:04:05+00', '2026-12-13 23:59:59.999999+00', '0044-03-15 12:00:00+00 BC', 'infinity', '-infinity', '2026-03-29 01:30:00+00', '2026-10-25 00:30:00+00', '2026-10-25 01:30:00+00', '1901-12-13 20:45:52+00', '1890-01-01 00:00:00+00']::timestamptz[])"},
	{"timestamptz_3", "k timestamp(3) with time zone", []string{"k"}, "unnest(ARRAY['2026-01-02 03:04:05.123+00', '2026-02-01 03:04:05.1+00', '2026-01-02 03:04:05.124+00', '2026-01-02 03:04:05+00', '2026-01-02 03:04:05.999+00', 'infinity', '0010-01-01 00:00:00.001+00 BC', '2026-06-30 23:59:59.5+00']::timestamptz(3)[])"},
	{"timestamp", "k timestamp", []string{"k"}, "unnest(ARRAY['2026-01-02 03:04:05.123456', '2026-02-01 03:04:05', 'infinity', '-infinity', '0044-03-15 12:00:00 BC', '2026-03-29 02:30:00', '2026-12-01 00:00:00', '1999-12-31 23:59:59.999999']::timestamp[])"},
	{"date", "k date", []string{"k"}, "unnest(ARRAY['2026-01-02', '2026-02-01', '2026-12-13', '0001-01-01 BC', 'infinity', '-infinity', '2026-01-12', '2026-12-01']::date[])"},
	{"text_icu", `k text COLLATE "en-x-icu"`, []string{"k"}, "unnest(ARRAY['a', 'A', 'b', 'B', 'é', 'e', 'E', 'ä', 'z', 'Z', '1', '10', '2', 'a b', 'ab', '-a', 'a-'])"},
	{"text_nondeterministic", "k text COLLATE adv_ci", []string{"k"}, "unnest(ARRAY['Abc', 'abd', 'ABE', 'x', 'Y', 'ß', 'ss2'])"},
	{"varchar_hostile", "k varchar(12)", []string{"k"}, "unnest(ARRAY[" + advQuoted(hostileKeys) + "])"},
	{"uuid", "k uuid", []string{"k"}, "unnest('{00000000-0000-0000-0000-000000000000,ffffffff-ffff-ffff-ffff-ffffffffffff,a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A12,a0eebc99-9c0b4ef8-bb6d6bb9-bd380a13,a0eebc999c0b4ef8bb6d6bb9bd380a14,10000000-0000-0000-0000-000000000000,90000000-0000-0000-0000-000000000000}'::uuid[])"},
	{"text_bigint", `region text COLLATE "en-x-icu", id bigint`, []string{"region", "id"}, "(SELECT r, i FROM unnest(ARRAY['eu', 'EU', 'Jp', 'jp', 'a,b', '']) r, unnest('{-1,2,10}'::bigint[]) i) v"},
	{"date_integer", "day date, n integer", []string{"day", "n"}, "(SELECT d, i FROM unnest(ARRAY['2026-01-02', '2026-02-01', 'infinity']::date[]) d, unnest('{1,-1}'::int[]) i) v"},
}

// advQuoted renders keys as a list of SQL string literals.
func advQuoted(keys []string) string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = "E'" + strings.NewReplacer(`\`, `\\`, "'", `\'`, "\t", `\t`, "\n", `\n`).Replace(k) + "'"
	}
	return strings.Join(out, ", ")
}

// advCanonical runs q in a transaction with fixed text settings, whatever
// the database sets, and returns its single text column sorted by the
// caller's ORDER BY.
func advCanonical(t *testing.T, db *pgtest.DB, q string) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, s := range []string{"SET LOCAL TimeZone = 'UTC'", "SET LOCAL DateStyle = 'ISO, YMD'", "SET LOCAL extra_float_digits = 3", "SET LOCAL IntervalStyle = 'postgres'"} {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := tx.Query(ctx, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return out
}

// TestAdvKeyTypesWithHostileSessionSettings: every key type a campaign
// accepts, with values whose text form is tricky (BC dates, infinity,
// trailing zeros, NaN, text in an ICU or a nondeterministic collation, the
// hostile text keys), frozen in the source's own database (cursor of the
// sink transaction) and streamed from another one, while both databases
// set DateStyle, TimeZone, IntervalStyle and extra_float_digits (ALTER
// DATABASE) to values unlike syncd's and unlike each other. A run stopped
// after 2 pages of 2, a run to the end in pages of 3 and a run after
// success: the grants equal the selected keys exactly, compared as
// canonical text by this test, and the last run reads no page.
func TestAdvKeyTypesWithHostileSessionSettings(t *testing.T) {
	t.Parallel()
	for _, across := range []bool{false, true} {
		t.Run(fmt.Sprintf("across=%v", across), func(t *testing.T) {
			t.Parallel()
			src := pgtest.NewDB(t)
			dst := src
			if across {
				dst = pgtest.NewDB(t)
			}
			for _, db := range []*pgtest.DB{src, dst} {
				db.Exec(t, "CREATE COLLATION IF NOT EXISTS adv_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)")
			}
			src.Exec(t, "ALTER DATABASE "+src.Name+" SET DateStyle = 'SQL, DMY'; ALTER DATABASE "+src.Name+" SET TimeZone = 'Asia/Kolkata';"+
				"ALTER DATABASE "+src.Name+" SET extra_float_digits = -15; ALTER DATABASE "+src.Name+" SET IntervalStyle = 'sql_standard'")
			if across {
				dst.Exec(t, "ALTER DATABASE "+dst.Name+" SET DateStyle = 'German'; ALTER DATABASE "+dst.Name+" SET TimeZone = 'America/St_Johns';"+
					"ALTER DATABASE "+dst.Name+" SET extra_float_digits = 0; ALTER DATABASE "+dst.Name+" SET IntervalStyle = 'iso_8601'")
			}
			for _, kt := range advKeyTypes {
				t.Run(kt.name, func(t *testing.T) {
					t.Parallel()
					advKeyTypeCampaign(t, src, dst, kt)
				})
			}
		})
	}
}

func advKeyTypeCampaign(t *testing.T, src, dst *pgtest.DB, kt advKeyType) {
	ctx := context.Background()
	table := "k_" + kt.name
	keyList := strings.Join(kt.key, ", ")
	src.Exec(t, fmt.Sprintf("CREATE TABLE public.%s (%s, pick boolean NOT NULL, PRIMARY KEY (%s))", table, kt.cols, keyList))
	src.Exec(t, fmt.Sprintf("INSERT INTO public.%s SELECT *, row_number() OVER () %% 3 <> 0 FROM %s", table, kt.values))
	yaml := func(size int) string {
		return fmt.Sprintf(`name: comeback
source:
  dsn: %s
  table: public.%s
  cursor: [%s]
  where: "pick"
sink:
  type: coupon_grants
  dsn: %s
  table: public.g_%s
  campaign: c_%s
  grant_page_size: %d
`, src.URL, table, keyList, dst.URL, kt.name, kt.name, size)
	}
	store := openStore(t)
	stop := make(chan struct{})
	res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: parseConfig(t, yaml(2)), Store: store, Logger: quiet, Stop: stop,
		Test: syncer.TestSignals{AfterCommit: func(_ context.Context, at syncer.Commit) error {
			if at.Page == 2 {
				close(stop)
			}
			return nil
		}}})
	if !errors.Is(err, syncer.ErrStopped) || res.Pages != 2 {
		t.Fatalf("first run: %d pages, err %v; want 2 pages and ErrStopped", res.Pages, err)
	}
	res, err = syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: parseConfig(t, yaml(3)), Store: store, Logger: quiet})
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	row := "ROW(" + keyList + ")::text"
	want := advCanonical(t, src, "SELECT "+row+" FROM public."+table+" WHERE pick ORDER BY "+row+" COLLATE \"C\"")
	got := advCanonical(t, dst, "SELECT "+row+" FROM public.g_"+kt.name+" ORDER BY "+row+" COLLATE \"C\"")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("grants differ from the selected keys:\n got %q\nwant %q", got, want)
	}
	if int64(len(want)) != res.Written+4 {
		t.Fatalf("the two runs made %d new grants; want %d", res.Written+4, len(want))
	}
	res, err = syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: parseConfig(t, yaml(3)), Store: store, Logger: quiet})
	if err != nil || res.Pages != 0 || res.Written != 0 {
		t.Fatalf("run after success: %d pages, %d new grants, err %v; want 0, 0, nil (progress cursor %v)", res.Pages, res.Written, err,
			keyRows(t, dst, "SELECT coalesce(cursor::text, 'NULL') FROM public.syncd_campaigns WHERE campaign_id = 'c_"+kt.name+"'"))
	}
}

// advYAML is a campaign on public.members with its own where clause.
func advYAML(src, dst *pgtest.DB, where string, size int) string {
	y := strings.Replace(configYAML(src, dst, size), `where: "`+dormantWhere+`"`, `where: "`+where+`"`, 1)
	if size == 0 {
		y = strings.NewReplacer("  grant_page_size: 0\n", "", "  page_size: 0\n", "").Replace(y)
	}
	return y
}

// TestAdvPageSizes: campaigns of 0 targets, of exactly one, of exactly
// whole chunks (3 of 100, 2 of 10,000 in one default page), in pages of
// one target (the first three also frozen from another database), and a campaign whose grant_page_size changes from run to run
// (1000, stopped after 2 pages; 300, stopped after 3; 7000 to the end; 1
// after success): each target is granted once, each run grants exactly
// what it read, and a run after success reads no page.
func TestAdvPageSizes(t *testing.T) {
	t.Parallel()
	db, other := pgtest.NewDB(t), pgtest.NewDB(t)
	newMembers(t, db)
	for _, tc := range []struct {
		name    string
		where   string
		size    int
		targets int64
		chunks  int64
		across  bool // frozen from another database (COPY)
	}{
		{"no target", "member_id < 0", 1000, 0, 0, false},
		{"no target across", "member_id < 0", 1000, 0, 0, true},
		{"one target", "member_id = 7", 1000, 1, 1, false},
		{"one target across", "member_id = 7", 1000, 1, 1, true},
		{"3 whole chunks of 100", "member_id <= 300", 100, 300, 3, false},
		{"3 whole chunks of 100 across", "member_id <= 300", 100, 300, 3, true},
		{"2 whole chunks of 10000 in one page", "member_id <= 20000", 0, 20000, 2, false},
		{"pages of 1", "member_id <= 250", 1, 250, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			id := "c" + strings.ReplaceAll(tc.name, " ", "_")
			dst := db
			if tc.across {
				dst = other
			}
			cfg := parseConfig(t, strings.Replace(advYAML(db, dst, tc.where, tc.size), "campaign: "+campaignID, "campaign: "+id, 1))
			store := openStore(t)
			res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
			if err != nil || res.Written != tc.targets || res.Rows != tc.targets {
				t.Fatalf("run: %d targets read, %d new grants, err %v; want %d, %d, nil", res.Rows, res.Written, err, tc.targets, tc.targets)
			}
			want := keyRows(t, db, "SELECT member_id::text FROM public.members WHERE "+tc.where+" ORDER BY member_id::text")
			got := keyRows(t, dst, "SELECT member_id::text FROM public.coupon_grants WHERE campaign_id = '"+id+"' ORDER BY member_id::text")
			if strings.Join(got, ",") != strings.Join(want, ",") || int64(len(want)) != tc.targets {
				t.Fatalf("%d grants; want the %d selected members (expected %d)", len(got), len(want), tc.targets)
			}
			if n := count(t, dst, "SELECT count(*) FROM public.coupon_grants_target_chunks WHERE campaign_id = '"+id+"'"); n != tc.chunks {
				t.Fatalf("%d chunks; want %d", n, tc.chunks)
			}
			res, err = syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
			if err != nil || res.Pages != 0 || res.Written != 0 {
				t.Fatalf("run after success: %d pages, %d new grants, err %v; want 0, 0, nil", res.Pages, res.Written, err)
			}
		})
	}

	t.Run("size changed between runs", func(t *testing.T) {
		ctx := context.Background()
		db, want, _, store := campaignSetup(t, 1000)
		stopAfter := func(n int64) (chan struct{}, func(context.Context, syncer.Commit) error) {
			stop := make(chan struct{})
			return stop, func(_ context.Context, at syncer.Commit) error {
				if at.Page == n {
					close(stop)
				}
				return nil
			}
		}
		var written int64
		for i, step := range []struct {
			size  int
			pages int64 // stop after; 0: to the end
		}{{1000, 2}, {300, 3}, {7000, 0}, {1, 0}} {
			o := syncer.Options{Kinds: kinds, Config: parseConfig(t, configYAML(db, db, step.size)), Store: store, Logger: quiet}
			if step.pages > 0 {
				o.Stop, o.Test.AfterCommit = stopAfter(step.pages)
			}
			res, err := syncer.Run(ctx, o)
			wantRows := int64(step.size) * step.pages
			if step.pages == 0 {
				wantRows = int64(len(want)) - written
			}
			if (step.pages > 0) != errors.Is(err, syncer.ErrStopped) || (step.pages == 0 && err != nil) || res.Written != wantRows || res.Rows != wantRows {
				t.Fatalf("run %d (pages of %d): %d targets read, %d new grants, err %v; want %d and %d", i+1, step.size, res.Rows, res.Written, err, wantRows, wantRows)
			}
			written += res.Written
			want := want[:written]
			checkExact(t, db, want)
		}
	})
}

// TestAdvChunksLeftWithoutTheirCampaign: the campaign row deleted by hand
// while its chunks stay (half of the "freeze again" recipe). The next run
// cannot freeze into the chunks table; it must say why in one line naming
// the table and what to do, not promise that the next run freezes again.
func TestAdvChunksLeftWithoutTheirCampaign(t *testing.T) {
	t.Parallel()
	db, _, cfg, store := campaignSetup(t, 1000)
	freezeOnly(t, cfg, store)
	db.Exec(t, "DELETE FROM public.syncd_campaigns")
	for run := 1; run <= 2; run++ {
		_, err := syncer.Run(context.Background(), syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
		if err == nil || !strings.Contains(err.Error(), advChunks) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "the next run freezes again") {
			t.Fatalf("run %d with chunks left from a deleted campaign row: %v; want one line naming %s that says what to do", run, err, advChunks)
		}
		t.Logf("run %d: %v", run, err)
	}
	if n := count(t, db, "SELECT count(*) FROM public.coupon_grants"); n != 0 {
		t.Fatalf("%d grants; want 0", n)
	}
}

// advLegacy freezes the campaign of db in the layout before chunks (a row
// per target), with the targets want, granted up to and including
// want[done-1] and the progress cursor there (none when done is 0).
func advLegacy(t *testing.T, db *pgtest.DB, want []int64, done int) {
	t.Helper()
	db.Exec(t, legacyDDL)
	var cursor any
	if done > 0 {
		cursor = []string{fmt.Sprint(want[done-1])}
	}
	db.Exec(t, `INSERT INTO public.syncd_campaigns (campaign_id, source, source_table, grants_table, key_columns, where_sql, as_of, targets, cursor, pages, status)
VALUES ($1, 'comeback', 'public.members', 'public.coupon_grants', '{member_id}', $2, now(), $3, $4, 3, 'granting')`, campaignID, dormantWhere, len(want), cursor)
	db.Exec(t, "INSERT INTO public.coupon_grants_targets SELECT $1, unnest($2::bigint[])", campaignID, want)
	db.Exec(t, "INSERT INTO public.coupon_grants (campaign_id, member_id) SELECT $1, unnest($2::bigint[])", campaignID, want[:done])
}

// advChunksDDL is the chunks table as docs/COUPONS.md defines it.
const advChunksDDL = `CREATE TABLE public.coupon_grants_target_chunks (campaign_id text NOT NULL, first_pos bigint NOT NULL, n integer NOT NULL,
  key_1 text[] NOT NULL CHECK (array_position(key_1, NULL) IS NULL), PRIMARY KEY (campaign_id, first_pos))`

// TestAdvLegacyMigratedByTwoRunsAtOnce: a campaign frozen in the layout
// before chunks, half granted, is resumed by two runs at once (two pods,
// two state files) whose files differ in grant_page_size, so that each
// would cut the targets into other chunks. Both copy the rows into chunks
// at the same moment (held by a lock on the chunks table until both wait;
// the two files name the source differently, as one name's runs exclude
// each other).
// Both runs must succeed, each target hold one grant, and the chunks hold
// each target once.
func TestAdvLegacyMigratedByTwoRunsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	want := newMembers(t, db)
	advLegacy(t, db, want, len(want)/2)
	db.Exec(t, advChunksDDL)
	lock, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, "LOCK TABLE "+advChunks+" IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for i, size := range []int{700, 300} {
		// Two source names: one name's runs exclude each other (runlock).
		cfg := parseConfig(t, strings.Replace(configYAML(db, db, size), "name: comeback", fmt.Sprintf("name: comeback%d", i), 1)+"  lock_timeout: 5m\n")
		store := openStore(t)
		go func() {
			_, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
			errs <- err
		}()
	}
	testutil.Eventually(t, time.Minute, "both runs copying the old targets into chunks", func() bool {
		if len(errs) > 0 {
			t.Fatalf("a run ended before both were copying: %v", <-errs)
		}
		// Each waits on the lock, or on the other (the campaign row).
		return count(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'syncd' AND wait_event_type = 'Lock'`) == 2
	})
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("run: %v", err)
		}
	}
	checkExact(t, db, want)
	if n := count(t, db, "SELECT sum(n) FROM "+advChunks); n != int64(len(want)) {
		t.Fatalf("chunks hold %d targets; want %d", n, len(want))
	}
	if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: parseConfig(t, configYAML(db, db, 500)), Store: openStore(t), Logger: quiet}); err != nil {
		t.Fatalf("run after both: %v", err)
	}
}

// TestAdvLegacyEdges: campaigns frozen before chunks with no target at all,
// and with the progress cursor at the last target (all granted), and one
// cursor short of it, each resumed with a page size unlike the old one.
func TestAdvLegacyEdges(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		targets int // how many of the dormant members are targets (-1: all)
		done    int // granted before (-1: all)
	}{
		{"no target", 0, 0},
		{"all granted", -1, -1},
		{"all but the last granted", -1, -2},
		{"one target, none granted", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := pgtest.NewDB(t)
			want := newMembers(t, db)
			if tc.targets >= 0 {
				want = want[:tc.targets]
			}
			done := tc.done
			if done < 0 {
				done = len(want) + done + 1
			}
			advLegacy(t, db, want, done)
			cfg, store := parseConfig(t, configYAML(db, db, 333)), openStore(t)
			res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
			if err != nil || res.Written != int64(len(want)-done) {
				t.Fatalf("run: %d new grants, err %v; want %d, nil", res.Written, err, len(want)-done)
			}
			checkExact(t, db, want)
			res, err = syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
			if err != nil || res.Pages != 0 || res.Written != 0 {
				t.Fatalf("run after success: %d pages, %d new grants, err %v; want 0, 0, nil", res.Pages, res.Written, err)
			}
		})
	}
}

// advWaiting counts syncd sessions of db waiting on a lock whose query
// starts with prefix.
func advWaiting(t *testing.T, db *pgtest.DB, event, prefix string) int64 {
	t.Helper()
	var n int64
	err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'syncd'
  AND wait_event_type = 'Lock' AND wait_event = $1 AND ltrim(query) LIKE $2 || '%'`, event, prefix).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAdvKillDuringTheFreeze: the real binary is killed (SIGKILL) in the
// middle of its freeze, after it inserted the campaign row and while it
// reads the targets (held there by an advisory lock that source.where
// takes), both when the sink's own cursor reads them and when they are
// streamed from another database. A second binary (another source name,
// so no run lock keeps it out) started meanwhile waits on the campaign
// row, freezes once the first is gone and logs the as_of it stored. Each
// target is granted once, and nothing of the killed freeze remains (no
// campaign row, chunk or grant is visible while the lock is held).
func TestAdvKillDuringTheFreeze(t *testing.T) {
	t.Parallel()
	for _, across := range []bool{false, true} {
		t.Run(fmt.Sprintf("across=%v", across), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			src := pgtest.NewDB(t)
			dst := src
			if across {
				dst = pgtest.NewDB(t)
			}
			want := newMembers(t, src)
			where := dormantWhere + " AND (SELECT pg_advisory_xact_lock_shared(4242)) IS NOT NULL"
			yaml := advYAML(src, dst, where, 1000)
			dir := t.TempDir()
			cfgA := writeConfig(t, yaml)
			cfgB := writeConfig(t, strings.Replace(yaml, "name: comeback", "name: comeback_b", 1))

			lock, err := src.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Rollback(ctx)
			if _, err := lock.Exec(ctx, "SELECT pg_advisory_xact_lock(4242)"); err != nil {
				t.Fatal(err)
			}
			a := bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgA, "--state", dir+"/a.db")
			a.Eventually(t, time.Minute, "run a reading the targets", func() bool { return advWaiting(t, src, "advisory", "") == 1 })
			b := bin.Start(t, nil, "run", "--once", "--source", "comeback_b", "--config", cfgB, "--state", dir+"/b.db")
			b.Eventually(t, time.Minute, "run b waiting on run a's campaign row", func() bool {
				return advWaiting(t, dst, "transactionid", `INSERT INTO "public"."syncd_campaigns"`) == 1
			})
			if r := a.Kill(t); r.Signal != syscall.SIGKILL {
				t.Fatalf("run a was not killed during its freeze: %s", r)
			}
			// Run a's sessions live on, waiting, until the lock goes: the
			// server sees the dead client only when it next writes to it.
			for _, q := range []string{"SELECT count(*) FROM public.syncd_campaigns", "SELECT count(*) FROM " + advChunks, "SELECT count(*) FROM public.coupon_grants"} {
				if n := count(t, dst, q); n != 0 {
					t.Fatalf("%s = %d while the only freeze left has not committed", q, n)
				}
			}
			if err := lock.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if r := b.Wait(t, time.Minute); r.Code != 0 {
				t.Fatalf("run b: %s", r)
			}
			checkExact(t, dst, want)
			e, ok := b.Output.Find("campaign frozen")
			asOf, _ := storedCampaign(t, dst)
			if !ok || a.Output.Count("campaign frozen") != 0 || e.Text("as_of") != asOf.UTC().Format(time.RFC3339Nano) {
				t.Fatalf("run b logged frozen %v (as_of %q), run a %d times; stored as_of %s", ok, e.Text("as_of"), a.Output.Count("campaign frozen"), asOf.UTC().Format(time.RFC3339Nano))
			}
			c := bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", cfgA, "--state", dir+"/a.db")
			if r := c.Wait(t, time.Minute); r.Code != 0 || newGrants(c.Output.String()) != "0" {
				t.Fatalf("run after success: %s (new grants %s); want exit 0 and 0", r, newGrants(c.Output.String()))
			}
			checkExact(t, dst, want)
		})
	}
}

// TestAdvTwoRunsAtOnce: a fresh campaign, and one stopped after 2 pages,
// run by two binaries at once whose files differ in source name (one
// name's runs exclude each other: TestTwoRunsAtOnce's second binary is
// skipped by the run lock) and in grant_page_size (300 and 1000, against
// 1000-target chunks). One run's first page is held on a grant of one of
// its targets by a transaction left open, and the other run waits on the
// campaign's row, which every page transaction locks before it grants (a
// fresh campaign: the freeze, which grants the first page, waits on the
// grant, and the other run on the campaign row the freeze inserted); then
// their pages take turns. Both succeed, each target has one grant,
// their new grants add up to the targets left, exactly one of them froze,
// and a run after them grants 0 and reads no page.
func TestAdvTwoRunsAtOnce(t *testing.T) {
	t.Parallel()
	for _, resumed := range []bool{false, true} {
		t.Run(fmt.Sprintf("resumed=%v", resumed), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, want, cfg, store := campaignSetup(t, 1000)
			done := 0
			if resumed {
				stop := make(chan struct{})
				if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet, Stop: stop, Test: syncer.TestSignals{AfterCommit: func(_ context.Context, at syncer.Commit) error {
					if at.Page == 2 {
						close(stop)
					}
					return nil
				}}}); !errors.Is(err, syncer.ErrStopped) {
					t.Fatalf("first run: %v; want ErrStopped", err)
				}
				done = 2000
			} else {
				db.Exec(t, grantsDDL)
			}
			blocker := holdGrant(t, db, want[done+10])
			dir := t.TempDir()
			a := bin.Start(t, nil, "run", "--once", "--source", "comeback", "--config", writeConfig(t, configYAML(db, db, 300)), "--state", dir+"/a.db")
			b := bin.Start(t, nil, "run", "--once", "--source", "comeback_b", "--config", writeConfig(t, strings.Replace(configYAML(db, db, 1000), "name: comeback", "name: comeback_b", 1)), "--state", dir+"/b.db")
			if resumed {
				a.Eventually(t, time.Minute, "one run waiting on the open grant, the other on the campaign's row", func() bool {
					return advWaiting(t, db, "transactionid", `INSERT INTO "public"."coupon_grants"`) == 1 &&
						advWaiting(t, db, "transactionid", `SELECT FROM "public"."syncd_campaigns"`) == 1
				})
			} else {
				// A fresh campaign in the grants' database is frozen with its
				// first page in one statement: one run's freeze waits on the
				// open grant, the other on that freeze's campaign row.
				a.Eventually(t, time.Minute, "one freeze waiting on the open grant, the other run on its campaign row", func() bool {
					return advWaiting(t, db, "transactionid", "WITH syncd_t") == 1 &&
						advWaiting(t, db, "transactionid", `INSERT INTO "public"."syncd_campaigns"`) == 1
				})
			}
			if err := blocker.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			ra, rb := a.Wait(t, 2*time.Minute), b.Wait(t, 2*time.Minute)
			if ra.Code != 0 || rb.Code != 0 {
				t.Fatalf("two runs at once: exit %d and %d\n--- a:\n%s--- b:\n%s", ra.Code, rb.Code, a.Output, b.Output)
			}
			checkExact(t, db, want)
			na, nb := newGrants(a.Output.String()), newGrants(b.Output.String())
			if x, y := atoi(t, na), atoi(t, nb); x+y != int64(len(want)-done) {
				t.Fatalf("new grants %s + %s; want %d", na, nb, len(want)-done)
			}
			if frozen := a.Output.Count("campaign frozen") + b.Output.Count("campaign frozen"); resumed && frozen != 0 || !resumed && frozen != 1 {
				t.Fatalf("%d runs froze the campaign", frozen)
			}
			res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
			if err != nil || res.Pages != 0 || res.Written != 0 {
				t.Fatalf("run after both: %d pages, %d new grants, err %v; want 0, 0, nil", res.Pages, res.Written, err)
			}
		})
	}
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("%q is not a number", s)
	}
	return n
}

// TestAdvRepairWhileGranting: `reconcile --repair` runs while a run grants:
// once between two pages (it grants every target left; the run's next
// plain INSERT meets them and goes on with ON CONFLICT) and once while a
// page's transaction is open (the repair waits for the page: both lock the
// campaign's row before they grant). The run succeeds and each target has
// one grant.
func TestAdvRepairWhileGranting(t *testing.T) {
	t.Parallel()
	for _, inside := range []bool{false, true} {
		t.Run(fmt.Sprintf("inside a page=%v", inside), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			const size = 700
			db, want, cfg, store := campaignSetup(t, size)
			type report struct {
				missing int64
				err     error
			}
			done := make(chan report, 1)
			repair := func() {
				rep, err := coupon.Reconcile(ctx, cfg, true)
				if err != nil {
					done <- report{err: err}
					return
				}
				done <- report{missing: rep.Missing}
			}
			o := syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet}
			if inside {
				calls := 0
				o.Test.Plan.BeforeCommit = func(context.Context, string) error {
					if calls++; calls == 3 {
						go repair()
						testutil.Eventually(t, time.Minute, "the repair waiting on the page for the campaign's row", func() bool {
							return count(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'SELECT FROM "public"."syncd_campaigns"%FOR UPDATE'`) == 1
						})
					}
					return nil
				}
			} else {
				o.Test.AfterCommit = func(_ context.Context, at syncer.Commit) error {
					if at.Page == 2 {
						repair()
					}
					return nil
				}
			}
			res, err := syncer.Run(ctx, o)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			rep := <-done
			if rep.err != nil {
				t.Fatalf("repair: %v", rep.err)
			}
			checkExact(t, db, want)
			// Between pages the repair granted all the rest. Inside page 3 it
			// saw page 3's keys as missing (not yet committed); its INSERT
			// waits for page 3 to commit (both lock the campaign's row
			// first) and then grants the pages after it, which the run's
			// later pages find granted: the run made at least its 3 pages.
			if rep.missing != int64(len(want))-2*size || !inside && res.Written != 2*size || inside && res.Written < 3*size {
				t.Fatalf("repair found %d missing, run made %d new grants; want %d missing and 2 pages (between pages) or at least 3 (inside page 3) of %d", rep.missing, res.Written, int64(len(want))-2*size, size)
			}
			if s := campaignStatus(t, db); s != "done" {
				t.Fatalf("campaign status %q; want done", s)
			}
		})
	}
}

// TestAdvChangedKeyInChunks: one frozen key replaced by hand with a key
// that was never a target. The chunks still hold as many targets, in
// order and in well-formed chunks, so a run grants the new key, not the
// replaced member, and reports success.
func TestAdvChangedKeyInChunks(t *testing.T) {
	t.Skip("BUG (limitation of the design, not fixed here): nothing records what the frozen keys were besides the chunks themselves (only their count, syncd_campaigns.targets), so a key changed by hand is granted in place of the member it replaced and the run succeeds; detecting it needs a fingerprint of the keys stored with the campaign row at the freeze (a new column)")
	t.Parallel()
	db, want, cfg, store := campaignSetup(t, 500)
	freezeOnly(t, cfg, store)
	db.Exec(t, "UPDATE "+advChunks+" SET key_1[1] = '99999999' WHERE first_pos = 500")
	_, err := syncer.Run(context.Background(), syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
	if err == nil {
		checkExact(t, db, want) // fails: want[500] has no grant, 99999999 has one
		return
	}
	if !strings.Contains(err.Error(), advChunks) {
		t.Fatalf("run after a frozen key was changed: %v; want an error naming %s", err, advChunks)
	}
}

// TestAdvProgressInTheSourcesCollation: text keys in an ICU collation
// (the source column's) that the sink's default collation (C.UTF-8 here)
// orders otherwise: k00001 ... k00150, then K00151 ... K00300, in the
// source's order by number, in the sink's with every K before every k. A
// run stopped after 20 pages of 10 must leave the progress cursor at its
// 200th target, and the next run must read only the 10 pages left.
func TestAdvProgressInTheSourcesCollation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE public.handles (handle text COLLATE "en-x-icu" PRIMARY KEY, dormant boolean NOT NULL)`)
	db.Exec(t, `INSERT INTO public.handles SELECT CASE WHEN i <= 150 THEN 'k' ELSE 'K' END || lpad(i::text, 5, '0'), true FROM generate_series(1, 300) i`)
	yaml := handlesYAML(db, db, 10)
	cfg, store := parseConfig(t, yaml), openStore(t)
	stop := make(chan struct{})
	res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet, Stop: stop, Test: syncer.TestSignals{AfterCommit: func(_ context.Context, at syncer.Commit) error {
		if at.Page == 20 {
			close(stop)
		}
		return nil
	}}})
	if !errors.Is(err, syncer.ErrStopped) || res.Written != 200 {
		t.Fatalf("first run: %d new grants, err %v; want 200 and ErrStopped", res.Written, err)
	}
	if c := keyRows(t, db, "SELECT cursor[1] FROM public.syncd_campaigns"); c[0] != "K00200" {
		t.Fatalf("progress cursor %q after 200 targets; want K00200", c[0])
	}
	res, err = syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
	if err != nil || res.Pages != 10 || res.Rows != 100 || res.Written != 100 {
		t.Fatalf("resumed run: %d pages, %d targets read, %d new grants, err %v; want 10, 100, 100", res.Pages, res.Rows, res.Written, err)
	}
	if n := count(t, db, "SELECT count(DISTINCT handle) FROM public.handle_coupons WHERE campaign_id = 'c1'"); n != 300 {
		t.Fatalf("%d members granted; want 300", n)
	}
}

// TestAdvDocRecipesPassTheChunkChecks: the hand edits docs/COUPONS.md
// recommends still work with the checks of the chunks' shape: accepting
// an extra grant as a target (a chunk appended after the last one, its
// size added to targets) and freezing by hand in chunks (of 1,000 here,
// in a schema and table whose names need quoting).
func TestAdvDocRecipesPassTheChunkChecks(t *testing.T) {
	t.Parallel()
	t.Run("accept an extra grant", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db, want, cfg, store := campaignSetup(t, 1000)
		if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet}); err != nil {
			t.Fatal(err)
		}
		active := ids(t, db, "SELECT member_id FROM public.members WHERE last_purchase_at > now() - interval '180 days' ORDER BY member_id LIMIT 2")
		db.Exec(t, "INSERT INTO public.coupon_grants (campaign_id, member_id) SELECT $1, unnest($2::bigint[])", campaignID, active)
		if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet}); err == nil || !strings.Contains(err.Error(), "2 grants are not targets") {
			t.Fatalf("run with 2 extra grants: %v; want them counted", err)
		}
		db.Exec(t, `BEGIN;
INSERT INTO public.coupon_grants_target_chunks SELECT 'comeback-2026-10', c.targets, 2, ARRAY['`+fmt.Sprint(active[0])+`', '`+fmt.Sprint(active[1])+`'] FROM public.syncd_campaigns c WHERE c.campaign_id = 'comeback-2026-10';
UPDATE public.syncd_campaigns SET targets = targets + 2 WHERE campaign_id = 'comeback-2026-10';
COMMIT;`)
		res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
		if err != nil || res.Written != 0 {
			t.Fatalf("run after accepting them: %d new grants, err %v; want 0, nil", res.Written, err)
		}
		all := append(append([]int64(nil), want...), active...)
		slices.Sort(all)
		checkExact(t, db, all)
	})
	t.Run("freeze by hand", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := pgtest.NewDB(t)
		want := newMembers(t, db)
		db.Exec(t, `CREATE SCHEMA "Promo ""x"""`)
		db.Exec(t, `CREATE TABLE "Promo ""x"""."Coupon Grants_target_chunks" (campaign_id text NOT NULL, first_pos bigint NOT NULL, n integer NOT NULL,
  key_1 text[] NOT NULL CHECK (array_position(key_1, NULL) IS NULL), PRIMARY KEY (campaign_id, first_pos));
CREATE TABLE "Promo ""x""".syncd_campaigns (campaign_id text PRIMARY KEY, source text NOT NULL, source_table text NOT NULL, grants_table text NOT NULL,
  key_columns text[] NOT NULL, where_sql text NOT NULL, as_of timestamptz NOT NULL, frozen_at timestamptz NOT NULL DEFAULT now(),
  targets bigint NOT NULL, cursor text[], pages bigint NOT NULL DEFAULT 0, status text NOT NULL,
  granted bigint, missing bigint, extra bigint, updated_at timestamptz NOT NULL DEFAULT now())`)
		db.Exec(t, `BEGIN;
INSERT INTO "Promo ""x""".syncd_campaigns (campaign_id, source, source_table, grants_table, key_columns, where_sql, as_of, targets, status)
VALUES ('comeback-2026-10', 'comeback', 'public.members', '"Promo ""x""".Coupon Grants', '{member_id}', '`+strings.ReplaceAll(dormantWhere, "'", "''")+`', now(), 0, 'granting');
INSERT INTO "Promo ""x"""."Coupon Grants_target_chunks" (campaign_id, first_pos, n, key_1)
SELECT 'comeback-2026-10', min(pos), count(*), array_agg(member_id::text ORDER BY pos)
FROM (SELECT m.member_id, row_number() OVER (ORDER BY m.member_id) - 1 AS pos FROM public.members m
      WHERE last_purchase_at < now() - interval '180 days') t
GROUP BY pos / 1000;
UPDATE "Promo ""x""".syncd_campaigns SET targets = (SELECT coalesce(sum(n), 0) FROM "Promo ""x"""."Coupon Grants_target_chunks" WHERE campaign_id = 'comeback-2026-10')
WHERE campaign_id = 'comeback-2026-10';
COMMIT;`)
		yaml := strings.Replace(configYAML(db, db, 1000), "table: public.coupon_grants", `table: '"Promo ""x"""."Coupon Grants"'`, 1)
		cfg := parseConfig(t, yaml)
		if cfg.Sink.Ident.String() != `"Promo ""x""".Coupon Grants` { // syncd's spelling, in grants_table
			t.Fatalf("sink.table parsed as %s", cfg.Sink.Ident)
		}
		res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: openStore(t), Logger: quiet})
		if err != nil || res.Written != int64(len(want)) || res.Campaign == nil || res.Campaign.Frozen {
			t.Fatalf("run of a campaign frozen by hand: %d new grants, err %v; want %d", res.Written, err, len(want))
		}
		got := ids(t, db, `SELECT member_id FROM "Promo ""x"""."Coupon Grants" WHERE campaign_id = $1 ORDER BY member_id`, campaignID)
		if !slices.Equal(got, want) {
			t.Fatalf("%d grants; want %d", len(got), len(want))
		}
	})
}

// TestAdvPagesReadOnlyTheirChunks: a page reads the chunks that hold it,
// not every chunk before it. 20,000 targets in pages (and chunks) of 100:
// the rows that the run reads from the chunks table (PostgreSQL's
// counters for the table, once the run's sessions have ended) stay within
// a few per page plus a few passes over all 200 chunks (the checks at the
// start, the position of the progress cursor, the final count), where
// reading every chunk before the page read about 200 x 200.
func TestAdvPagesReadOnlyTheirChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	newMembers(t, db)
	cfg := parseConfig(t, advYAML(db, db, "member_id <= 20000", 100))
	stop := make(chan struct{})
	// Stopped after page 2 so that the second run also finds its position.
	if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: openStore(t), Logger: quiet, Stop: stop, Test: syncer.TestSignals{AfterCommit: func(_ context.Context, at syncer.Commit) error {
		if at.Page == 2 {
			close(stop)
		}
		return nil
	}}}); !errors.Is(err, syncer.ErrStopped) {
		t.Fatalf("first run: %v; want ErrStopped", err)
	}
	read := func() int64 {
		testutil.Eventually(t, time.Minute, "the run's sessions to end", func() bool {
			return count(t, db, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'syncd'") == 0
		})
		var n int64
		testutil.Eventually(t, time.Minute, "the counters of the chunks table", func() bool {
			n = count(t, db, "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM (SELECT pg_stat_clear_snapshot()) x, pg_stat_user_tables WHERE relid = 'public.coupon_grants_target_chunks'::regclass")
			return n > 0
		})
		return n
	}
	before := read()
	res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: openStore(t), Logger: quiet})
	if err != nil || res.Pages != 198 {
		t.Fatalf("second run: %d pages, err %v; want 198", res.Pages, err)
	}
	var after int64
	testutil.Eventually(t, time.Minute, "the second run's reads in the counters", func() bool {
		after = read()
		return after > before+200 // at least its check of all 200 chunks
	})
	if got, bound := after-before, int64(10*198+5*200); got > bound {
		t.Fatalf("the run read %d rows of the chunks table for 198 pages over 200 chunks; want at most %d", got, bound)
	} else {
		t.Logf("the run read %d rows of the chunks table for 198 pages over 200 chunks", got)
	}
}

// TestAdvProgressCursorNotATarget: the campaign row's progress cursor set
// by hand to a key that is not a target (say, to "rewind" the campaign).
// The run stops, naming the chunks table, and what it says to do must
// lead to a run that succeeds: `reconcile --repair` grants what is missing
// but leaves the cursor where no run can find it, so every later run
// failed the same way; a cursor reset to NULL makes the next run walk all
// targets (the grants made are kept by ON CONFLICT).
func TestAdvProgressCursorNotATarget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, want, cfg, store := campaignSetup(t, 500)
	stop := make(chan struct{})
	if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet, Stop: stop, Test: syncer.TestSignals{AfterCommit: func(_ context.Context, at syncer.Commit) error {
		if at.Page == 2 {
			close(stop)
		}
		return nil
	}}}); !errors.Is(err, syncer.ErrStopped) {
		t.Fatalf("first run: %v; want ErrStopped", err)
	}
	db.Exec(t, "UPDATE public.syncd_campaigns SET cursor = '{0}'")
	_, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
	const reset = `UPDATE "public"."syncd_campaigns" SET cursor = NULL WHERE campaign_id = 'comeback-2026-10'`
	if err == nil || !strings.Contains(err.Error(), advChunks) || !strings.Contains(err.Error(), reset) {
		t.Fatalf("run with a progress cursor that is not a target: %v; want an error naming %s and saying %q", err, advChunks, reset)
	}
	db.Exec(t, reset)
	res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
	if err != nil || res.Written != int64(len(want)-1000) {
		t.Fatalf("run after the reset: %d new grants, err %v; want %d", res.Written, err, len(want)-1000)
	}
	checkExact(t, db, want)
}

// TestAdvDeferrableGrantsKey: an existing grants table whose primary key
// is DEFERRABLE, which ON CONFLICT cannot use as its arbiter. It passed the
// check of the grants table; the first page went in by a plain INSERT and
// the first conflict (a grant made before the run: the broken batch that
// docs/COUPONS.md tells how to finish) failed that run and every later one
// with "ON CONFLICT does not support deferrable unique constraints". The
// run must refuse the table before any grant, as a config error naming it
// and the statement that fixes it (ALTER CONSTRAINT works only on foreign
// keys).
func TestAdvDeferrableGrantsKey(t *testing.T) {
	t.Parallel()
	db, want, cfg, store := campaignSetup(t, 1000)
	db.Exec(t, `CREATE TABLE public.coupon_grants (campaign_id text NOT NULL, member_id bigint NOT NULL,
  granted_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (campaign_id, member_id) DEFERRABLE INITIALLY IMMEDIATE)`)
	db.Exec(t, "INSERT INTO public.coupon_grants (campaign_id, member_id) VALUES ($1, $2)", campaignID, want[1500])
	_, err := syncer.Run(context.Background(), syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "public.coupon_grants") || !strings.Contains(err.Error(), "DEFERRABLE") {
		t.Fatalf("run into a grants table with a deferrable key: %v; want a config error naming the table and DEFERRABLE", err)
	}
	if n := count(t, db, "SELECT count(*) FROM public.coupon_grants"); n != 1 {
		t.Fatalf("%d grants; want only the one made before", n)
	}
	// What the error says to run makes the table fit.
	i := strings.Index(err.Error(), "ALTER TABLE ")
	if i < 0 {
		t.Fatalf("error %v gives no statement to run", err)
	}
	db.Exec(t, err.Error()[i:])
	if _, err := syncer.Run(context.Background(), syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet}); err != nil {
		t.Fatalf("run after the statement the error gave: %v", err)
	}
	checkExact(t, db, want)
}

// TestAdvDSNSpellsASessionSettingInLowerCase: pgutil gives every session
// DateStyle ISO and TimeZone UTC, so that keys and as_of keep their text
// form from one session to another. A DSN that spells one of them otherwise
// (datestyle=..., or PGTZ in the environment, which pgx turns into
// "timezone") used to travel beside pgutil's own in the startup packet,
// and each session got one or the other at random: a source DSN with
// datestyle=SQL,DMY made about half of the freezes fail ("date/time field
// value out of range"). Every freeze must succeed.
func TestAdvDSNSpellsASessionSettingInLowerCase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	newMembers(t, src)
	failed := 0
	for i := range 8 {
		yaml := strings.Replace(advYAML(src, dst, "member_id <= 100", 1000), "dsn: "+src.URL, "dsn: "+src.URL+"&datestyle=SQL,DMY", 1)
		yaml = strings.Replace(yaml, "campaign: "+campaignID, fmt.Sprintf("campaign: c%d", i), 1)
		if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: parseConfig(t, yaml), Store: openStore(t), Logger: quiet}); err != nil {
			failed++
			t.Logf("campaign c%d: %v", i, err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of 8 campaigns failed with a source DSN that sets datestyle", failed)
	}
}
