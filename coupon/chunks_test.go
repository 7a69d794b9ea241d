package coupon_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/syncd/syncd/coupon"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/syncer"
)

// hostileKeys are text keys that a text array literal or COPY must escape:
// quotes, backslashes, commas, braces, tabs, newlines, NULL spelled out,
// spaces at the ends, the empty string, non-ASCII.
var hostileKeys = []string{`a"b`, `back\slash`, `c,d`, `{e}`, "tab\there", "new\nline", "NULL", " pad ", "", "ümlaut ✓", `\N`, `"`, `\`}

// handlesYAML is a campaign c1 over the dormant rows of public.handles
// (text key handle) into public.handle_coupons of sink.
func handlesYAML(src, sink *pgtest.DB, pageSize int) string {
	return fmt.Sprintf(`name: handles
source:
  dsn: %s
  table: public.handles
  cursor: [handle]
  where: "dormant"
sink:
  type: coupon_grants
  dsn: %s
  table: public.handle_coupons
  campaign: c1
  grant_page_size: %d
`, src.URL, sink.URL, pageSize)
}

// values renders keys as SQL VALUES rows of escaped string literals.
func values(keys []string) string {
	rows := make([]string, len(keys))
	for i, k := range keys {
		rows[i] = "(E'" + strings.NewReplacer(`\`, `\\`, "'", `\'`, "\t", `\t`, "\n", `\n`).Replace(k) + "')"
	}
	return strings.Join(rows, ", ")
}

// TestHostileTextKeysInChunks: a campaign over text keys that need
// escaping, frozen in the sink's own database (one INSERT ... SELECT) and
// across databases (keys streamed into COPY), in pages of 3: every key is
// granted once, exactly as the source spells it.
func TestHostileTextKeysInChunks(t *testing.T) {
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
			src.Exec(t, `CREATE TABLE public.handles (handle text PRIMARY KEY, dormant boolean NOT NULL)`)
			for i, k := range hostileKeys {
				src.Exec(t, "INSERT INTO public.handles VALUES ($1, $2), ($3, false)", k, true, fmt.Sprintf("active %d", i))
			}
			yaml := handlesYAML(src, dst, 3)
			cfg := parseConfig(t, yaml)
			res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: openStore(t), Logger: quiet})
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			got := keyRows(t, dst, "SELECT handle FROM public.handle_coupons WHERE campaign_id = 'c1' ORDER BY handle")
			// The sink's own order of the keys, to compare sorted lists.
			want := keyRows(t, dst, "SELECT handle FROM public.handle_coupons WHERE false UNION ALL SELECT k FROM (VALUES "+values(hostileKeys)+") v(k) ORDER BY 1")
			if !slices.Equal(got, want) || res.Written != int64(len(hostileKeys)) {
				t.Fatalf("granted %q (%d new); want %q", got, res.Written, want)
			}
			rep, err := coupon.Reconcile(ctx, cfg, false)
			if err != nil || rep.Missing != 0 || rep.Extra != 0 {
				t.Fatalf("reconcile: %+v, %v; want no difference", rep, err)
			}
		})
	}
}

// legacyDDL is what a syncd before target chunks made: one row per frozen
// target.
const legacyDDL = `
CREATE TABLE public.syncd_campaigns (
  campaign_id text PRIMARY KEY, source text NOT NULL, source_table text NOT NULL, grants_table text NOT NULL,
  key_columns text[] NOT NULL, where_sql text NOT NULL, as_of timestamptz NOT NULL, frozen_at timestamptz NOT NULL DEFAULT now(),
  targets bigint NOT NULL, cursor text[], pages bigint NOT NULL DEFAULT 0, status text NOT NULL,
  granted bigint, missing bigint, extra bigint, updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE public.coupon_grants (campaign_id text NOT NULL, member_id bigint NOT NULL,
  granted_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (campaign_id, member_id));
CREATE TABLE public.coupon_grants_targets (campaign_id text NOT NULL, member_id bigint NOT NULL,
  PRIMARY KEY (campaign_id, member_id));`

// TestCampaignFrozenBeforeChunks: a campaign frozen and half granted by a
// syncd that kept one row per target is finished by this one: its targets
// are copied into chunks once, the run resumes after the stored progress
// cursor, and every target ends with exactly one grant. A one-off
// reconcile of another such campaign (never run by this syncd) works too.
func TestCampaignFrozenBeforeChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, want, cfg, store := campaignSetup(t, 700)
	db.Exec(t, legacyDDL)
	half := want[len(want)/2-1]
	for _, id := range []string{campaignID, "other"} {
		db.Exec(t, `INSERT INTO public.syncd_campaigns (campaign_id, source, source_table, grants_table, key_columns, where_sql, as_of, targets, cursor, pages, status)
VALUES ($1, 'comeback', 'public.members', 'public.coupon_grants', '{member_id}', $2, now(), $3, ARRAY[$4::text], 3, 'granting')`,
			id, dormantWhere, len(want), fmt.Sprint(half))
		db.Exec(t, "INSERT INTO public.coupon_grants_targets SELECT $1, unnest($2::bigint[])", id, want)
		db.Exec(t, "INSERT INTO public.coupon_grants (campaign_id, member_id) SELECT $1, m FROM unnest($2::bigint[]) m WHERE m <= $3", id, want, half)
	}
	res, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
	if err != nil {
		t.Fatalf("run of a campaign frozen before chunks: %v", err)
	}
	checkExact(t, db, want)
	if res.Written != int64(len(want)/2+len(want)%2) || res.Campaign == nil || res.Campaign.Frozen {
		t.Fatalf("run made %d new grants (campaign %+v); want %d, not frozen again", res.Written, res.Campaign, len(want)/2+len(want)%2)
	}
	if n := count(t, db, "SELECT sum(n) FROM public.coupon_grants_target_chunks WHERE campaign_id = '"+campaignID+"'"); n != int64(len(want)) {
		t.Fatalf("chunks hold %d targets; want %d", n, len(want))
	}

	other := parseConfig(t, strings.Replace(configYAML(db, db, 700), "campaign: "+campaignID, "campaign: other", 1))
	rep, err := coupon.Reconcile(ctx, other, true)
	if err != nil || rep.Missing != int64(len(want)/2+len(want)%2) || rep.Extra != 0 || !rep.Repaired {
		t.Fatalf("reconcile --repair of a campaign frozen before chunks: %+v, %v; want %d missing, repaired", rep, err, len(want)/2+len(want)%2)
	}
	got := ids(t, db, "SELECT member_id FROM public.coupon_grants WHERE campaign_id = 'other' ORDER BY member_id")
	if !slices.Equal(got, want) {
		t.Fatalf("after the repair campaign other has %d grants; want %d", len(got), len(want))
	}
}

// TestChangedTargetsAreRefused: when the chunks of a frozen campaign no
// longer hold as many targets as it froze (a chunk deleted by hand), a run
// refuses to go on and says so, instead of granting a smaller set and
// calling it done.
func TestChangedTargetsAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, want, cfg, store := campaignSetup(t, 500)
	stop := make(chan struct{})
	close(stop) // freeze, then stop before the first page
	if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet, Stop: stop}); err != syncer.ErrStopped {
		t.Fatalf("run: %v; want ErrStopped", err)
	}
	db.Exec(t, "DELETE FROM public.coupon_grants_target_chunks WHERE first_pos = 500")
	_, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet})
	wantMsg := fmt.Sprintf("campaign %s froze %d targets but public.coupon_grants_target_chunks holds %d of them", campaignID, len(want), len(want)-500)
	if err == nil || !strings.Contains(err.Error(), wantMsg) {
		t.Fatalf("run with a chunk deleted: %v; want %q", err, wantMsg)
	}
	if n := count(t, db, "SELECT count(*) FROM public.coupon_grants"); n != 0 {
		t.Fatalf("%d grants made from changed targets; want 0", n)
	}
}

// TestChunksCompressedWithLZ4: a chunks table the first run creates keeps
// its key arrays with lz4 where the server has it (pglz, the default,
// writes a large campaign's chunks at half the speed), and the campaign
// grants every target exactly once from them.
func TestChunksCompressedWithLZ4(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, want, cfg, store := campaignSetup(t, 700)
	if _, err := syncer.Run(ctx, syncer.Options{Kinds: kinds, Config: cfg, Store: store, Logger: quiet}); err != nil {
		t.Fatalf("run: %v", err)
	}
	checkExact(t, db, want)
	var lz4 bool
	if err := db.Pool.QueryRow(ctx, "SELECT coalesce((SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'), false)").Scan(&lz4); err != nil {
		t.Fatal(err)
	}
	wantMethod := ""
	if lz4 {
		wantMethod = "l"
	}
	var method string
	if err := db.Pool.QueryRow(ctx, "SELECT attcompression::text FROM pg_attribute WHERE attrelid = 'public.coupon_grants_target_chunks'::regclass AND attname = 'key_1'").Scan(&method); err != nil {
		t.Fatal(err)
	}
	if method != wantMethod {
		t.Fatalf("key_1 of the chunks table has compression %q; want %q (server has lz4: %v)", method, wantMethod, lz4)
	}
	if n := count(t, db, "SELECT sum(n) FROM public.coupon_grants_target_chunks WHERE campaign_id = '"+campaignID+"'"); n != int64(len(want)) {
		t.Fatalf("chunks hold %d targets; want %d", n, len(want))
	}
}
