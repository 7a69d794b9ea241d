package coupon

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
)

// CampaignsTable is the bookkeeping table, one row per campaign, in the
// schema of sink.table.
const CampaignsTable = "syncd_campaigns"

// ChunksSuffix is appended to the grants table's name to name the table of
// frozen targets (public.coupon_grants -> public.coupon_grants_target_chunks):
// one row per chunk of up to ChunkSize targets in a fixed order, each key
// column an array of text values.
const ChunksSuffix = "_target_chunks"

// TargetsSuffix names the table of frozen targets of syncd before chunks,
// one row per target (public.coupon_grants_targets). syncd no longer writes
// it: a campaign frozen there is copied into chunks by its next run.
const TargetsSuffix = "_targets"

// ChunkSize is the most targets one chunk holds (fewer when
// sink.grant_page_size is smaller, so that a page reads one chunk).
const ChunkSize = 10_000

// tables are the quoted names of a campaign's tables.
type tables struct {
	grants, chunks, campaigns string
	targets                   string // the table of targets before chunks
	grantsName, chunksName    config.Table
}

func tablesOf(c *config.Config) (tables, error) {
	t := c.Sink.Ident
	if len(t.Name)+len(ChunksSuffix) > 63 {
		return tables{}, c.Errorf("sink.table", "%q is too long: syncd keeps the targets in %q, which must fit PostgreSQL's 63 bytes; use a shorter name", t.Name, t.Name+ChunksSuffix)
	}
	return tables{
		grants:     pgutil.Qualified(t.Schema, t.Name),
		chunks:     pgutil.Qualified(t.Schema, t.Name+ChunksSuffix),
		targets:    pgutil.Qualified(t.Schema, t.Name+TargetsSuffix),
		campaigns:  pgutil.Qualified(t.Schema, CampaignsTable),
		grantsName: t,
		chunksName: config.Table{Schema: t.Schema, Name: t.Name + ChunksSuffix},
	}, nil
}

// keyArrays are the names of the chunks table's key columns, one per key
// column of the grants table, in sink.key order.
func (g *Grants) keyArrays() []string {
	out := make([]string, len(g.keys))
	for i := range g.keys {
		out[i] = fmt.Sprintf("key_%d", i+1)
	}
	return out
}

// lockSQL takes the lock under which the coupon tables are created and
// says, in the same round trip, whether the server can compress a column
// with lz4.
const lockSQL = "SELECT coalesce((SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'), false)" +
	" FROM (SELECT pg_advisory_xact_lock(hashtext('syncd coupon tables'))) l"

// ensureTables creates the grants, target chunks and campaigns tables when
// they are missing and checks an existing grants table. The DDL runs under a
// transaction-scoped advisory lock so that two first runs at once do not
// race on CREATE TABLE.
func (g *Grants) ensureTables(ctx context.Context) error {
	var keyDefs []string
	for _, k := range g.keys {
		keyDefs = append(keyDefs, pgutil.Ident(k.Name)+" "+k.Type+" NOT NULL")
	}
	keyList := pgutil.IdentList("", g.keyNames())
	// One statement per table, in the order of names (the chunks' last,
	// once the server's compression methods are known).
	names := []string{g.t.campaigns, g.t.grants, g.t.chunks}
	// A chunk's key arrays (tens of kB each) are compressed with lz4 where
	// the server has it (PostgreSQL 14 and later, built with lz4): pglz,
	// the default, took 50-60 ms to write the 12 chunks of 120,000 keys,
	// lz4 30-35 ms, for 20% more bytes. Reading them back costs the same.
	chunksDDL := func(lz4 bool) string {
		compression := ""
		if lz4 {
			compression = " COMPRESSION lz4"
		}
		var arrayDefs []string
		for _, a := range g.keyArrays() {
			arrayDefs = append(arrayDefs, a+" text[]"+compression+" NOT NULL CHECK (array_position("+a+", NULL) IS NULL)")
		}
		return "CREATE TABLE IF NOT EXISTS " + g.t.chunks + " (\n  campaign_id text NOT NULL,\n  first_pos bigint NOT NULL,\n  n integer NOT NULL,\n  " +
			strings.Join(arrayDefs, ",\n  ") + ",\n  PRIMARY KEY (campaign_id, first_pos)\n)"
	}
	ddl := []string{
		"CREATE TABLE IF NOT EXISTS " + g.t.campaigns + ` (
  campaign_id  text PRIMARY KEY,
  source       text NOT NULL,
  source_table text NOT NULL,
  grants_table text NOT NULL,
  key_columns  text[] NOT NULL,
  where_sql    text NOT NULL,
  as_of        timestamptz NOT NULL,
  frozen_at    timestamptz NOT NULL DEFAULT now(),
  targets      bigint NOT NULL,
  cursor       text[],
  pages        bigint NOT NULL DEFAULT 0,
  status       text NOT NULL,
  granted      bigint,
  missing      bigint,
  extra        bigint,
  updated_at   timestamptz NOT NULL DEFAULT now()
)`,
		"CREATE TABLE IF NOT EXISTS " + g.t.grants + " (\n  campaign_id text NOT NULL,\n  " +
			strings.Join(keyDefs, ",\n  ") + ",\n  granted_at timestamptz NOT NULL DEFAULT now(),\n  PRIMARY KEY (campaign_id, " + keyList + ")\n)",
	}
	// Every run but a campaign's first finds the three tables: one round
	// trip says so, and the locked transaction below runs only otherwise.
	var all bool
	if err := g.conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND to_regclass($3) IS NOT NULL", names[0], names[1], names[2]).Scan(&all); err != nil {
		return fmt.Errorf("look for coupon tables %s, %s and %s: %w", g.t.grants, g.t.chunksName, g.t.campaigns, err)
	}
	if all {
		return g.checkGrantsTable(ctx)
	}
	err := pgx.BeginFunc(ctx, g.conn, func(tx pgx.Tx) error {
		var lz4 bool
		if err := tx.QueryRow(ctx, lockSQL).Scan(&lz4); err != nil {
			return err
		}
		for i, q := range append(ddl, chunksDDL(lz4)) {
			// CREATE TABLE IF NOT EXISTS needs CREATE on the schema even when
			// the table exists: skip it for a table an administrator made,
			// so that a role with only DML on those tables works.
			var exists bool
			if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", names[i]).Scan(&exists); err != nil {
				return err
			}
			if exists {
				continue
			}
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create coupon tables %s, %s and %s: %w; create them by hand (see docs/COUPONS.md) or grant CREATE on schema %s", g.t.grants, g.t.chunksName, g.t.campaigns, err, pgutil.Ident(g.t.grantsName.Schema))
	}
	return g.checkGrantsTable(ctx)
}

// checkGrantsTable verifies that an existing grants table (perhaps left by an
// earlier batch) has the columns syncd writes, with the source key's types,
// and the unique key that ON CONFLICT needs.
func (g *Grants) checkGrantsTable(ctx context.Context) error {
	// The columns, the unique key and a DEFERRABLE key: one round trip.
	have := map[string]string{}
	var unique bool
	var con, def string
	var deferrable bool
	b := &pgx.Batch{}
	b.Queue(`
SELECT a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, g.t.grants).Query(func(rows pgx.Rows) error {
		var name, typ string
		_, err := pgx.ForEachRow(rows, []any{&name, &typ}, func() error { have[name] = typ; return nil })
		if err != nil {
			return fmt.Errorf("describe grants table %s: %w", g.t.grantsName, err)
		}
		return nil
	})
	b.Queue(`
SELECT EXISTS (
  SELECT 1 FROM pg_index i
  WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indisvalid
    AND i.indpred IS NULL AND i.indexprs IS NULL
    AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_attribute a
         WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey))
        = (SELECT array_agg(k ORDER BY k) FROM unnest($2::text[]) k))`,
		g.t.grants, append([]string{"campaign_id"}, g.keyNames()...)).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&unique); err != nil {
			return fmt.Errorf("read indexes of grants table %s: %w", g.t.grantsName, err)
		}
		return nil
	})
	// ON CONFLICT, which a page falls back to once a key turns out granted
	// already and which a repair uses, refuses a table with a DEFERRABLE
	// key among its arbiters (even next to an immediate one on the same
	// columns): such a table failed the run at its first conflict, and
	// every run after it. A constraint cannot be made immediate in place.
	b.Queue(`
SELECT conname::text, regexp_replace(pg_get_constraintdef(oid), ' DEFERRABLE( INITIALLY (DEFERRED|IMMEDIATE))?$', '')
FROM pg_constraint WHERE conrelid = to_regclass($1) AND condeferrable AND contype IN ('p', 'u', 'x') ORDER BY conname LIMIT 1`, g.t.grants).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&con, &def)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read constraints of grants table %s: %w", g.t.grantsName, err)
		}
		deferrable = true
		return nil
	})
	if err := g.conn.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	want := append([]page.Column{{Name: "campaign_id", Type: "text"}}, g.keys...)
	want = append(want, page.Column{Name: "granted_at", Type: "timestamp with time zone"})
	for _, col := range want {
		got, ok := have[col.Name]
		if !ok {
			return g.cfg.Errorf("sink.table", "grants table %s has no column %q; add it: ALTER TABLE %s ADD COLUMN %s %s", g.t.grantsName, col.Name, g.t.grants, pgutil.Ident(col.Name), col.Type)
		}
		if got != col.Type {
			return g.cfg.Errorf("sink.table", "column %q of grants table %s is %s but must be %s (the source key's type)", col.Name, g.t.grantsName, got, col.Type)
		}
	}
	if !unique {
		return g.cfg.Errorf("sink.table", "grants table %s has no primary key or unique index on (campaign_id, %s), which makes each grant unique; add one (after removing duplicates)", g.t.grantsName, strings.Join(g.keyNames(), ", "))
	}
	if deferrable {
		return g.cfg.Errorf("sink.table", "constraint %s of grants table %s is DEFERRABLE, which ON CONFLICT (how a member is kept from a second grant) cannot use; recreate it checked immediately: ALTER TABLE %s DROP CONSTRAINT %s, ADD CONSTRAINT %s %s",
			con, g.t.grantsName, g.t.grants, pgutil.Ident(con), pgutil.Ident(con), def)
	}
	return nil
}
