package coupon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/source"
)

// Campaign is a campaign's row in syncd_campaigns.
type Campaign struct {
	ID          string
	Source      string
	SourceTable string
	GrantsTable string
	KeyColumns  []string
	Where       string
	AsOf        time.Time
	FrozenAt    time.Time
	Targets     int64
	// Cursor is the key of the last target whose page has committed (text).
	Cursor []string
	Pages  int64
	Status string
	// Frozen is true when this call froze the campaign.
	Frozen bool
	// InDB is true when this call froze it in the sink's database, which
	// is the source's, with the first grant page (freezeInDB); false when
	// the keys were streamed from the source session (freezeStream).
	InDB bool
}

// Campaign statuses.
const (
	StatusGranting = "granting"
	StatusDone     = "done"
	StatusFailed   = "failed"
)

// Load reads the campaign row; ok is false before the first freeze.
func (g *Grants) Load(ctx context.Context) (c Campaign, ok bool, err error) {
	err = g.conn.QueryRow(ctx, `SELECT campaign_id, source, source_table, grants_table, key_columns, where_sql, as_of, frozen_at,
  targets, cursor, pages, status FROM `+g.t.campaigns+` WHERE campaign_id = $1`, g.campaign).Scan(
		&c.ID, &c.Source, &c.SourceTable, &c.GrantsTable, &c.KeyColumns, &c.Where, &c.AsOf, &c.FrozenAt, &c.Targets, &c.Cursor, &c.Pages, &c.Status)
	if errors.Is(err, pgx.ErrNoRows) {
		return Campaign{}, false, nil
	}
	if err != nil {
		return Campaign{}, false, fmt.Errorf("read campaign %s from %s: %w", g.campaign, g.t.campaigns, err)
	}
	return c, true, nil
}

// Freeze returns the campaign, freezing it first when no run has: as_of is
// read from the source's clock, and the distinct keys that source.where
// selects at as_of are written, in key order, to the target chunks table in
// one sink transaction with the campaign row. src is the connection to the
// source database, whose role decides which rows the targets are: only when
// the sink connection provably reads the same database with the same
// rights (sameRights) does the sink's database freeze the targets itself,
// granting the first page in the same statement (freezeInDB); otherwise
// the keys are streamed from src and the chunks written with COPY.
//
// Chunks, not one row per target: a row per target with its primary key
// cost as much to write as the grants themselves (the freeze took as long
// as the INSERT ... SELECT a campaign is measured against); a chunk of
// ChunkSize keys is one row.
func (g *Grants) Freeze(ctx context.Context, src source.Session, srcTable config.Table) (Campaign, error) {
	same, err := sameRights(ctx, src, g.conn, g.cfg.Source.DSN, g.cfg.Sink.DSN)
	if err != nil {
		return Campaign{}, fmt.Errorf("freeze targets of campaign %s: %w", g.campaign, err)
	}
	for attempt := 1; ; attempt++ {
		c, ok, err := g.Load(ctx)
		if err != nil {
			return Campaign{}, err
		}
		if ok {
			if err := g.checkUnchanged(c, srcTable); err != nil {
				return Campaign{}, err
			}
			return c, g.ensureChunks(ctx, c)
		}
		if attempt == 1 {
			if err := g.checkNotElsewhere(ctx); err != nil {
				return Campaign{}, err
			}
		}
		var froze bool
		if same {
			first := g.cfg.Sink.GrantPageSize
			if g.stopped() {
				first = 0 // asked to stop before the freeze: no page starts
			}
			froze, err = g.freezeInDB(ctx, srcTable, first)
		} else {
			froze, err = g.freezeStream(ctx, src, srcTable)
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40001" && attempt < 5 {
			continue // another run froze the campaign meanwhile: read its row
		}
		var left leftChunksError
		if errors.As(err, &left) {
			return Campaign{}, err // freezing again would fail the same way
		}
		if err != nil {
			return Campaign{}, fmt.Errorf("freeze targets of campaign %s into %s: %w; nothing was frozen, the next run freezes again", g.campaign, g.t.chunksName, err)
		}
		if !froze {
			continue
		}
		c, _, err = g.Load(ctx)
		c.Frozen = true
		c.InDB = same
		return c, err
	}
}

// checkUnchanged refuses a config whose campaign identity differs from the
// frozen one: its targets (source table, key, where) and its grants table.
// Other frozen targets would silently disagree with the config, and grants
// written to another table would leave the frozen targets ungranted while
// the counts of the new, empty tables said "done".
func (g *Grants) checkUnchanged(c Campaign, srcTable config.Table) error {
	type change struct{ key, was, now string }
	var changed []change
	if c.SourceTable != srcTable.String() {
		changed = append(changed, change{"source.table", c.SourceTable, srcTable.String()})
	}
	if !slices.Equal(c.KeyColumns, g.keyNames()) {
		changed = append(changed, change{"sink.key", strings.Join(c.KeyColumns, ","), strings.Join(g.keyNames(), ",")})
	}
	if c.Where != g.cfg.Source.Where {
		changed = append(changed, change{"source.where", c.Where, g.cfg.Source.Where})
	}
	if c.GrantsTable != g.t.grantsName.String() {
		changed = append(changed, change{"sink.table", c.GrantsTable, g.t.grantsName.String()})
	}
	if len(changed) == 0 {
		return nil
	}
	var diff []string
	for _, ch := range changed {
		diff = append(diff, fmt.Sprintf("%s %q → %q", ch.key, ch.was, ch.now))
	}
	return g.cfg.Errorf(changed[0].key, "campaign %s was frozen at %s with other settings (%s): a frozen campaign cannot change its targets or grants table, or members would be granted twice or never; restore the config, or start a new campaign with a new sink.campaign id",
		c.ID, c.AsOf.UTC().Format(time.RFC3339Nano), strings.Join(diff, "; "))
}

// checkNotElsewhere refuses to freeze a campaign whose id is already
// frozen in another schema's campaigns table of the sink database: its
// sink.table was moved to another schema, and freezing again would grant
// every target a second time.
func (g *Grants) checkNotElsewhere(ctx context.Context) error {
	rows, err := g.conn.Query(ctx, `
SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = $1 AND c.relkind IN ('r', 'p') AND c.oid IS DISTINCT FROM to_regclass($2)::oid
  AND has_table_privilege(c.oid, 'SELECT')`, CampaignsTable, g.t.campaigns)
	if err != nil {
		return fmt.Errorf("look for campaign %s in other schemas: %w", g.campaign, err)
	}
	others, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("look for campaign %s in other schemas: %w", g.campaign, err)
	}
	for _, other := range others {
		var grants string
		err := g.conn.QueryRow(ctx, "SELECT grants_table FROM "+other+" WHERE campaign_id = $1", g.campaign).Scan(&grants)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return fmt.Errorf("look for campaign %s in %s: %w", g.campaign, other, err)
		}
		return g.cfg.Errorf("sink.table", "campaign %s was already frozen with grants table %s (see %s), and this config says %s: a frozen campaign cannot change its grants table, or members would be granted twice; restore sink.table, or start a new campaign with a new sink.campaign id",
			g.campaign, grants, other, g.t.grantsName)
	}
	return nil
}

// selectKeys is the query of the targets at as_of, with as_of bound to
// parameter n when the where clause uses it: SELECT list FROM the source
// table WHERE ..., then tail.
func (g *Grants) selectKeys(srcTable config.Table, list, tail string, n int) (string, bool) {
	q := "SELECT " + list + " FROM " + pgutil.Qualified(srcTable.Schema, srcTable.Name)
	where, bound := BindAsOf(strings.TrimSpace(g.cfg.Source.Where), n)
	if where != "" {
		q += " WHERE (" + where + ")"
	}
	return q + tail, bound
}

// distinctKeys is the tail of the targets' query: the keys in key order,
// each once. When the key columns are NOT NULL and hold a valid,
// non-partial unique index of the source table (its primary key, say),
// every row has its own key and ORDER BY is enough; otherwise GROUP BY
// makes them distinct (a grouped index scan cost about a fifth more).
// A table with inheritance children is read with them, and its index does
// not cover their rows: it keeps GROUP BY (a partitioned table's unique
// index covers every partition). A key duplicated anyway (an index
// dropped after this check) is refused by the campaign's final
// comparison, never granted twice.
func (g *Grants) distinctKeys(ctx context.Context, tx pgx.Tx, srcTable config.Table) (string, error) {
	list := pgutil.IdentList("", g.keyNames())
	unique, err := g.uniqueKey(ctx, tx, srcTable)
	if err != nil {
		return "", err
	}
	if unique {
		return " ORDER BY " + list, nil
	}
	return " GROUP BY " + list + " ORDER BY " + list, nil
}

// uniqueKey reports whether the key columns are NOT NULL and hold a valid,
// non-partial unique index of the source table that covers all its rows
// (see distinctKeys).
func (g *Grants) uniqueKey(ctx context.Context, tx pgx.Tx, srcTable config.Table) (bool, error) {
	var unique bool
	err := tx.QueryRow(ctx, `
WITH k AS (
  SELECT a.attnum, a.attnotnull FROM pg_attribute a
  WHERE a.attrelid = to_regclass($1) AND a.attname = ANY($2::text[]) AND NOT a.attisdropped)
SELECT (SELECT count(*) FROM k) = cardinality($2::text[])
  AND (SELECT bool_and(attnotnull) FROM k)
  AND (SELECT c.relkind = 'p' OR NOT c.relhassubclass FROM pg_class c WHERE c.oid = to_regclass($1))
  AND EXISTS (
    SELECT 1 FROM pg_index i
    WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indisvalid
      AND i.indpred IS NULL AND i.indexprs IS NULL
      AND (i.indkey::int2[])[0:i.indnkeyatts - 1] <@ (SELECT array_agg(attnum) FROM k))`,
		pgutil.Qualified(srcTable.Schema, srcTable.Name), g.keyNames()).Scan(&unique)
	if err != nil {
		return false, fmt.Errorf("read unique indexes of %s: %w", srcTable, err)
	}
	return unique, nil
}

// chunkSize is how many targets the chunks of a campaign frozen now hold.
func (g *Grants) chunkSize() int {
	return min(ChunkSize, max(g.cfg.Sink.GrantPageSize, 100))
}

// chunkColumns is the column list of an INSERT or COPY into the chunks table.
func (g *Grants) chunkColumns() string {
	return "campaign_id, first_pos, n, " + strings.Join(g.keyArrays(), ", ")
}

// leftChunksError says that the campaign being frozen already has chunks:
// its row was deleted and its chunks were not.
type leftChunksError struct{ msg string }

func (e leftChunksError) Error() string { return e.msg }

// checkNoChunks refuses to freeze a campaign that has chunks but no row
// (the row was deleted by hand, its chunks not): the freeze's chunks would
// collide with them on the primary key, run after run, and the error said
// that the next run freezes again. tx holds the campaign's new row, so no
// other freeze of it writes chunks meanwhile.
func (g *Grants) checkNoChunks(ctx context.Context, tx pgx.Tx) error {
	var n int64
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+g.t.chunks+" WHERE campaign_id = $1", g.campaign).Scan(&n); err != nil || n == 0 {
		return err
	}
	return g.leftChunks(n)
}

// leftChunks is the error of checkNoChunks about n chunks.
func (g *Grants) leftChunks(n int64) error {
	return leftChunksError{fmt.Sprintf("campaign %s has no row in %s but %d target chunks in %s: its frozen state was deleted only in part; to freeze it again, delete its chunks too (DELETE FROM %s WHERE campaign_id = '%s'), or restore its row; nothing was frozen",
		g.campaign, config.Table{Schema: g.t.grantsName.Schema, Name: CampaignsTable}, n, g.t.chunksName, g.t.chunks, strings.ReplaceAll(g.campaign, "'", "''"))}
}

func (g *Grants) insertCampaign(ctx context.Context, tx pgx.Tx, srcTable config.Table, asOf string) (bool, error) {
	tag, err := tx.Exec(ctx, "INSERT INTO "+g.t.campaigns+
		" (campaign_id, source, source_table, grants_table, key_columns, where_sql, as_of, targets, status)"+
		" VALUES ($1, $2, $3, $4, $5, $6, $7::timestamptz, 0, $8) ON CONFLICT (campaign_id) DO NOTHING",
		g.campaign, g.cfg.Name, srcTable.String(), g.t.grantsName.String(), g.keyNames(), g.cfg.Source.Where, asOf, StatusGranting)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// freezeInDB freezes the campaign and grants its first grant page in one
// REPEATABLE READ transaction of the sink's database, which is also the
// source's, read with the source's rights (see sameRights), so that as_of
// and the snapshot the targets are read in are taken together. One
// statement does the work of the freeze and of the page, set-based, and
// no key travels through syncd: it selects the distinct targets at as_of,
// numbered in key order, once (a materialized CTE), writes them to the
// chunks table and grants the first first of them (a plain INSERT, or ON
// CONFLICT DO NOTHING when the campaign has grants already, see Apply).
// The progress cursor (the page's last key), the page and the target count
// commit with them, so the page is exactly one that Apply would have
// committed; the run reports it as its first page (takeFrozenPage). The
// freeze and the page are one statement because reading the targets back
// from the chunks for the first page, or streaming them through syncd,
// cost as much as a third of the grants themselves. It reports false when
// another run froze first.
func (g *Grants) freezeInDB(ctx context.Context, srcTable config.Table, first int) (bool, error) {
	tx, err := g.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	unique, err := g.uniqueKey(ctx, tx, srcTable)
	if err != nil {
		return false, err
	}
	// One round trip: the sort memory, as_of (the transaction's start),
	// the campaign's row, chunks left without a row, grants made before.
	var asOf string
	var chunks int64
	var before, arrays bool
	b := &pgx.Batch{}
	b.Queue(sortMemSQL)
	b.Queue(noParallelSQL)
	b.Queue("SELECT now()::text").QueryRow(func(row pgx.Row) error { return row.Scan(&asOf) })
	b.Queue(fewRowsSQL, pgutil.Qualified(srcTable.Schema, srcTable.Name), countArraysMax).QueryRow(func(row pgx.Row) error { return row.Scan(&arrays) })
	b.Queue("SELECT count(*) FROM "+g.t.chunks+" WHERE campaign_id = $1", g.campaign).QueryRow(func(row pgx.Row) error { return row.Scan(&chunks) })
	b.Queue("SELECT EXISTS (SELECT FROM "+g.t.grants+" WHERE campaign_id = $1)", g.campaign).QueryRow(func(row pgx.Row) error { return row.Scan(&before) })
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return false, err
	}
	ok, err := g.insertCampaign(ctx, tx, srcTable, asOf)
	if err != nil || !ok {
		return false, err
	}
	if chunks > 0 {
		return false, g.leftChunks(chunks)
	}
	written, err := g.freezeAndGrant(ctx, tx, srcTable, unique, arrays, asOf, first, before)
	if err != nil {
		return false, err
	}
	var to int64
	var last []string
	if first > 0 {
		p, err := g.ReadSpan(ctx, nil, 0, first) // on tx's session
		if err != nil {
			return false, err
		}
		to, last = int64(p.Len()), p.Last
	}
	pages := 0
	if to > 0 {
		pages = 1
	}
	_, err = tx.Exec(ctx, "UPDATE "+g.t.campaigns+" SET targets = (SELECT coalesce(sum(n), 0) FROM "+g.t.chunks+" WHERE campaign_id = $1),"+
		" cursor = $2::text[], pages = pages + $3, updated_at = now() WHERE campaign_id = $1", g.campaign, last, pages)
	if err != nil {
		return false, err
	}
	if to > 0 {
		if err := g.test.BeforeCommit.Fire(ctx, g.campaign); err != nil {
			return false, err
		}
		g.frozenPage = &page.Page{Span: &page.Span{Count: int(to)}, Last: last}
		g.frozenWritten = written
	}
	// Durable whatever the sink's synchronous_commit: a crash must not let
	// a later run freeze again at another as_of, nor the state file get
	// ahead of the first page.
	if err := pgutil.Durable(ctx, tx); err != nil {
		g.frozenPage = nil
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		g.frozenPage = nil
		return false, err
	}
	g.written += written
	return true, nil
}

// freezeAndGrant runs the statement of freezeInDB in tx: the targets into
// chunks and the first first of them into the grants, under a savepoint:
// a plain INSERT that meets a grant made meanwhile is applied again with
// ON CONFLICT DO NOTHING (before: the campaign had grants already). It
// returns the grants it made.
func (g *Grants) freezeAndGrant(ctx context.Context, tx pgx.Tx, srcTable config.Table, unique, arrays bool, asOf string, first int, before bool) (int64, error) {
	for {
		q, bound := g.freezeInDBSQL(srcTable, unique, before)
		if arrays {
			q, bound = g.freezeArraysSQL(srcTable, unique, before)
		}
		args := []any{g.campaign, first}
		if bound {
			args = append(args, asOf)
		}
		if !before {
			if _, err := tx.Exec(ctx, "SAVEPOINT syncd_freeze"); err != nil {
				return 0, err
			}
		}
		tag, err := tx.Exec(ctx, q, args...)
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			if before {
				g.conflicted = true
			}
			return tag.RowsAffected(), nil
		case isUniqueViolation(err) && !before:
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT syncd_freeze"); err != nil {
				return 0, err
			}
			before = true
		case errors.As(err, &pgErr) && (pgErr.Code == "23502" || pgErr.Code == "23514"):
			return 0, fmt.Errorf("a key column (%s) of a target is NULL; a target needs a whole key: exclude NULL keys in source.where: %w", strings.Join(g.keyNames(), ", "), err)
		default:
			return 0, err
		}
	}
}

// freezeInDBSQL is the statement of freezeInDB: $1 the campaign, $2 how
// many targets the first page grants, $3 as_of (when where uses it).
func (g *Grants) freezeInDBSQL(srcTable config.Table, unique, onConflict bool) (string, bool) {
	names := g.keyNames()
	list := pgutil.IdentList("", names)
	tail := ""
	if !unique {
		tail = " GROUP BY " + list
	}
	sel, bound := g.selectKeys(srcTable, list+", row_number() OVER (ORDER BY "+list+") - 1 AS syncd_pos", tail, 3)
	aggs := make([]string, len(names))
	for i, k := range names {
		aggs[i] = "array_agg(" + pgutil.Ident(k) + "::text ORDER BY syncd_pos)"
	}
	q := "WITH syncd_t AS MATERIALIZED (" + sel + "),\n" +
		" syncd_c AS (INSERT INTO " + g.t.chunks + " (" + g.chunkColumns() + ") SELECT $1, min(syncd_pos), count(*), " + strings.Join(aggs, ", ") +
		" FROM syncd_t GROUP BY syncd_pos / " + strconv.Itoa(g.chunkSize()) + ")\n" +
		"INSERT INTO " + g.t.grants + " (campaign_id, " + list + ", granted_at) SELECT $1, " + list + ", now() FROM syncd_t WHERE syncd_pos < $2 ORDER BY syncd_pos"
	if onConflict {
		q += " ON CONFLICT (campaign_id, " + list + ") DO NOTHING"
	}
	return q, bound
}

// freezeArraysSQL is freezeInDBSQL's statement for a source table of at
// most countArraysMax rows (fewRowsSQL): the same chunks and the same first
// page, from one array per key column of all the targets in key order. The
// chunks are slices of those arrays and the page is their first $2
// elements, where freezeInDBSQL numbers every target with a window
// function and groups the numbered rows by chunk, which sorts them again
// (and, in PostgreSQL 15, once more in each chunk's ordered array_agg):
// 170-200 ms against 330-390 ms for 120,000 targets, most of a campaign's
// cost beyond its grants. One scan feeds every array from one sorted
// subquery, so the columns of a key stay together in the same position;
// the order of rows into a plain aggregate over a sorted subquery is the
// subquery's when nothing is joined at its level (PostgreSQL's docs on
// aggregate expressions), and noParallelSQL keeps a parallel plan from
// merging partial arrays in another order. The arrays are built in server
// memory, outside work_mem: hence the limit on the table's rows. The first
// page's keys are a function scan of its own, the arrays' slices read by
// subqueries: a function scan WITH ORDINALITY comes out in the order of
// its ordinal, which the planner knows, so ORDER BY syncd_ord costs no
// sort (joined with syncd_t, the planner sorted the page's 50,000 rows).
func (g *Grants) freezeArraysSQL(srcTable config.Table, unique, onConflict bool) (string, bool) {
	names := g.keyNames()
	list := pgutil.IdentList("", names)
	tail := " ORDER BY " + list
	if !unique {
		tail = " GROUP BY " + list + tail
	}
	sel, bound := g.selectKeys(srcTable, list, tail, 3)
	arrs := g.keyArrays()
	size := strconv.Itoa(g.chunkSize())
	aggs := make([]string, len(names))
	slices := make([]string, len(names))
	firsts := make([]string, len(names))
	for i, k := range names {
		aggs[i] = "array_agg(" + pgutil.Ident(k) + ") AS " + arrs[i]
		slices[i] = "a." + arrs[i] + "[p + 1 : p + " + size + "]::text[]"
		firsts[i] = "(SELECT a." + arrs[i] + "[1 : $2] FROM syncd_t a)"
	}
	q := "WITH syncd_t AS MATERIALIZED (SELECT count(*) AS syncd_n, " + strings.Join(aggs, ", ") + " FROM (" + sel + ") s),\n" +
		" syncd_c AS (INSERT INTO " + g.t.chunks + " (" + g.chunkColumns() + ") SELECT $1, p, least(" + size + ", a.syncd_n - p)::integer, " + strings.Join(slices, ", ") +
		" FROM syncd_t a, generate_series(0, a.syncd_n - 1, " + size + ") p)\n" +
		"INSERT INTO " + g.t.grants + " (campaign_id, " + list + ", granted_at) SELECT $1, " + pgutil.IdentList("u.", names) + ", now()" +
		" FROM unnest(" + strings.Join(firsts, ", ") + ") WITH ORDINALITY AS u(" + list + ", syncd_ord) ORDER BY u.syncd_ord"
	if onConflict {
		q += " ON CONFLICT (campaign_id, " + list + ") DO NOTHING"
	}
	return q, bound
}

// stopped reports whether the run was asked to stop (a graceful stop:
// the page in flight commits, no new page starts).
func (g *Grants) stopped() bool {
	select {
	case <-g.stop:
		return true
	default:
		return false
	}
}

// takeFrozenPage returns the grant page that the freeze committed with the
// campaign (freezeInDB), once; ok is false when there is none.
func (g *Grants) takeFrozenPage() (p page.Page, ok bool) {
	if g.frozenPage == nil || g.frozenReported {
		return page.Page{}, false
	}
	g.frozenReported = true
	return *g.frozenPage, true
}

// freezeStream freezes across databases: as_of and the distinct keys, in
// the source's key order, come from one REPEATABLE READ snapshot of the
// source, and their chunks are streamed with COPY into the chunks table
// inside the sink transaction that inserts the campaign row.
func (g *Grants) freezeStream(ctx context.Context, src source.Session, srcTable config.Table) (bool, error) {
	stx, err := src.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return false, fmt.Errorf("source: %w", err)
	}
	defer stx.Rollback(context.WithoutCancel(ctx))
	var asOf string
	if err := stx.QueryRow(ctx, "SELECT now()::text").Scan(&asOf); err != nil {
		return false, fmt.Errorf("source: %w", err)
	}
	tx, err := g.conn.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	ok, err := g.insertCampaign(ctx, tx, srcTable, asOf)
	if err != nil || !ok {
		return false, err
	}
	if err := g.checkNoChunks(ctx, tx); err != nil {
		return false, err
	}
	tail, err := g.distinctKeys(ctx, stx, srcTable)
	if err != nil {
		return false, fmt.Errorf("source: %w", err)
	}
	sel, bound := g.selectKeys(srcTable, pgutil.IdentList("", g.keyNames()), tail, 1)
	var params [][]byte
	if bound {
		params = [][]byte{[]byte(asOf)}
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var n int64
	go func() {
		var serr error
		n, serr = g.streamChunks(sctx, src, sel, params, pw)
		done <- serr
	}()
	_, err = tx.Conn().PgConn().CopyFrom(ctx, pr, "COPY "+g.t.chunks+" ("+g.chunkColumns()+") FROM STDIN")
	if err != nil {
		cancel() // stop reading the source: the sink side has failed
	}
	pr.CloseWithError(errors.New("copy ended")) // unblocks the writer if COPY failed early
	if serr := <-done; serr != nil && err == nil {
		err = fmt.Errorf("source: %w", serr)
	}
	if err != nil {
		return false, err
	}
	if err := g.setTargets(ctx, tx, n); err != nil {
		return false, err
	}
	// Durable whatever the sink's synchronous_commit: a crash must not let
	// a later run freeze again at another as_of.
	if err := pgutil.Durable(ctx, tx); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// streamChunks reads the keys the source query returns, in its order, and
// writes them to w as rows of the chunks table in COPY text format (each
// key column one text array), then closes w. It returns how many keys it
// wrote.
func (g *Grants) streamChunks(ctx context.Context, src source.Session, q string, params [][]byte, w *io.PipeWriter) (int64, error) {
	var buf bytes.Buffer
	ch := g.newChunker()
	var werr error
	flush := func() {
		row, ok := ch.take()
		if !ok {
			return
		}
		pgutil.AppendCopyText(&buf, [][][]byte{row})
		if buf.Len() >= 256<<10 {
			_, werr = w.Write(buf.Bytes())
			buf.Reset()
		}
	}
	rr := src.PgConn().ExecParams(ctx, q, params, nil, nil, nil)
	for rr.NextRow() {
		if werr != nil {
			continue
		}
		if werr = ch.add(rr.Values()); werr == nil && ch.full() {
			flush()
		}
	}
	_, err := rr.Close()
	if err == nil && werr == nil {
		flush()
		if werr == nil && buf.Len() > 0 {
			_, werr = w.Write(buf.Bytes())
		}
	}
	if err == nil {
		err = werr
	}
	w.CloseWithError(err) // nil closes with io.EOF: the end of the COPY data
	return ch.pos, err
}

// chunker gathers keys, in the frozen order, into rows of the chunks table:
// campaign, first_pos, n and one text array literal per key column.
type chunker struct {
	g      *Grants
	size   int
	arrays [][]byte
	pos    int64 // keys added so far
	in     int64 // of them in the chunk being built
}

func (g *Grants) newChunker() *chunker {
	return &chunker{g: g, size: g.chunkSize(), arrays: make([][]byte, len(g.keys))}
}

// add appends one key (its columns as text).
func (c *chunker) add(key [][]byte) error {
	for i, v := range key {
		if v == nil {
			return fmt.Errorf("key column %q of a target is NULL; a target needs a whole key: exclude NULL keys in source.where", c.g.keys[i].Name)
		}
		c.arrays[i] = appendArrayElem(c.arrays[i], v)
	}
	c.pos++
	c.in++
	return nil
}

// full reports whether the chunk being built holds its size.
func (c *chunker) full() bool { return c.in >= int64(c.size) }

// take returns the chunk being built as a row of text values and starts
// the next; ok is false when it is empty.
func (c *chunker) take() (row [][]byte, ok bool) {
	if c.in == 0 {
		return nil, false
	}
	row = [][]byte{[]byte(c.g.campaign), strconv.AppendInt(nil, c.pos-c.in, 10), strconv.AppendInt(nil, c.in, 10)}
	for i := range c.arrays {
		row = append(row, append(c.arrays[i], '}'))
		c.arrays[i] = nil
	}
	c.in = 0
	return row, true
}

func (g *Grants) setTargets(ctx context.Context, tx pgx.Tx, n int64) error {
	_, err := tx.Exec(ctx, "UPDATE "+g.t.campaigns+" SET targets = $2 WHERE campaign_id = $1", g.campaign, n)
	return err
}

// ensureChunks copies the targets of a campaign frozen by a syncd before
// chunks (one row per target in the targets table) into chunks, once, in key
// order, and checks that the chunks hold as many targets as the campaign
// froze, in chunks that follow each other and hold n keys each. The old
// rows are left in place.
//
// The shape matters as much as the count: a page ends at a position and the
// run resumes from the position of a key, so a chunk whose arrays are
// shorter than its n leaves a position without a key (a target dropped
// without a trace, or a page ending on nothing), and one that does not
// start where the chunk before it ends makes positions that no page or two
// pages read.
func (g *Grants) ensureChunks(ctx context.Context, c Campaign) error {
	have, legacy, bad, err := g.chunkShape(ctx)
	if err != nil {
		return err
	}
	if have == 0 && c.Targets > 0 && legacy {
		if err := g.copyLegacy(ctx); err != nil {
			return err
		}
		if have, _, bad, err = g.chunkShape(ctx); err != nil {
			return err
		}
	}
	if have != c.Targets {
		return fmt.Errorf("campaign %s froze %d targets but %s holds %d of them: the frozen targets were changed by hand; restore them (see docs/COUPONS.md) or start a new campaign with a new sink.campaign id",
			g.campaign, c.Targets, g.t.chunksName, have)
	}
	if bad != nil {
		return g.badChunk(ctx, *bad)
	}
	return nil
}

// chunkShape reads how many targets the campaign's chunks say they hold
// (the sum of n), whether the table of targets before chunks exists, and
// the first_pos of the first chunk that is not well formed (nil: none):
// each key array one-dimensional, from index 1, with n elements, and each
// chunk starting where the one before it ends (the first at 0). Each
// array is read once (array_dims).
func (g *Grants) chunkShape(ctx context.Context) (have int64, legacy bool, bad *int64, err error) {
	ok := []string{"first_pos = lag(first_pos + n, 1, 0::bigint) OVER (ORDER BY first_pos)"}
	for _, a := range g.keyArrays() {
		ok = append(ok, "array_dims("+a+") IS NOT DISTINCT FROM CASE WHEN n > 0 THEN '[1:' || n || ']' END")
	}
	q := "SELECT coalesce(sum(n), 0)::bigint, to_regclass($2) IS NOT NULL, min(first_pos) FILTER (WHERE NOT ok)" +
		" FROM (SELECT first_pos, n, " + strings.Join(ok, " AND ") + " AS ok FROM " + g.t.chunks + " WHERE campaign_id = $1) c"
	if err := g.conn.QueryRow(ctx, q, g.campaign, g.t.targets).Scan(&have, &legacy, &bad); err != nil {
		return 0, false, nil, fmt.Errorf("read the target chunks of campaign %s from %s: %w", g.campaign, g.t.chunksName, err)
	}
	return have, legacy, bad, nil
}

// badChunk is the error about the chunk at firstPos that chunkShape found
// not well formed: what it says and what it holds.
func (g *Grants) badChunk(ctx context.Context, firstPos int64) error {
	dims := make([]string, len(g.keys))
	for i, a := range g.keyArrays() {
		dims[i] = "coalesce(array_dims(c." + a + "), '[]')"
	}
	var n int64
	var prevEnd int64
	var got []string
	err := g.conn.QueryRow(ctx, "SELECT c.n, coalesce((SELECT p.first_pos + p.n FROM "+g.t.chunks+" p WHERE p.campaign_id = $1 AND p.first_pos < $2 ORDER BY p.first_pos DESC LIMIT 1), 0),"+
		" ARRAY["+strings.Join(dims, ", ")+"] FROM "+g.t.chunks+" c WHERE c.campaign_id = $1 AND c.first_pos = $2", g.campaign, firstPos).Scan(&n, &prevEnd, &got)
	if err != nil {
		return fmt.Errorf("read the target chunk at first_pos %d of campaign %s from %s: %w", firstPos, g.campaign, g.t.chunksName, err)
	}
	what := fmt.Sprintf("starts at %d but the chunks before it end at %d", firstPos, prevEnd)
	if prevEnd == firstPos {
		what = fmt.Sprintf("says n = %d but its key arrays (%s) are %s, not [1:%d]", n, strings.Join(g.keyArrays(), ", "), strings.Join(got, ", "), n)
	}
	return fmt.Errorf("campaign %s: its target chunk at first_pos %d in %s %s: the frozen targets were changed by hand; restore them (see docs/COUPONS.md) or start a new campaign with a new sink.campaign id",
		g.campaign, firstPos, g.t.chunksName, what)
}

// copyLegacy copies the targets of a campaign frozen before chunks into
// chunks of chunkSize targets, once: it holds the campaign row while it
// looks for chunks and copies. Two runs at once both found no chunks, and
// when their files gave them different chunk sizes (grant_page_size) the
// second's chunks that did not collide with the first's by first_pos were
// added to them, overlapping: every later run stopped on the count.
func (g *Grants) copyLegacy(ctx context.Context) error {
	list := pgutil.IdentList("", g.keyNames())
	aggs := make([]string, len(g.keys))
	for i, k := range g.keyNames() {
		aggs[i] = "array_agg(" + pgutil.Ident(k) + "::text ORDER BY syncd_pos)"
	}
	q := "INSERT INTO " + g.t.chunks + " (" + g.chunkColumns() + ") SELECT $1, min(syncd_pos), count(*), " + strings.Join(aggs, ", ") +
		" FROM (SELECT " + list + ", row_number() OVER (ORDER BY " + list + ") - 1 AS syncd_pos FROM " + g.t.targets + " WHERE campaign_id = $1) s" +
		" GROUP BY syncd_pos / " + strconv.Itoa(g.chunkSize())
	err := pgx.BeginFunc(ctx, g.conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT FROM "+g.t.campaigns+" WHERE campaign_id = $1 FOR UPDATE", g.campaign); err != nil {
			return err
		}
		var copied bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM "+g.t.chunks+" WHERE campaign_id = $1)", g.campaign).Scan(&copied); err != nil || copied {
			return err // another run copied them while this one waited
		}
		if _, err := tx.Exec(ctx, q, g.campaign); err != nil {
			return err
		}
		return pgutil.Durable(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("copy the targets of campaign %s from %s into %s: %w", g.campaign, g.t.targets, g.t.chunksName, err)
	}
	return nil
}

// appendArrayElem appends v as the next element of a text array literal
// being built in a (which starts with '{' when empty).
func appendArrayElem(a, v []byte) []byte {
	if len(a) == 0 {
		a = append(a, '{')
	} else {
		a = append(a, ',')
	}
	a = append(a, '"')
	for _, c := range v {
		if c == '"' || c == '\\' {
			a = append(a, '\\')
		}
		a = append(a, c)
	}
	return append(a, '"')
}
