package coupon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
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
// read from the source's clock, and the keys that source.where selects at
// as_of are written to the targets table in one sink transaction with the
// campaign row, then the targets table is ANALYZEd (without statistics the
// keyset pages fall back to full sorts). src is the connection to the source
// database, whose role decides which rows the targets are: only when the
// sink connection provably reads with the same rights (sameRights) are the
// keys copied by one INSERT ... SELECT on the sink, otherwise they are
// streamed from src with COPY.
func (g *Grants) Freeze(ctx context.Context, src *pgx.Conn, srcTable config.Table) (Campaign, error) {
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
			return c, g.analyzeIfNever(ctx)
		}
		if attempt == 1 {
			if err := g.checkNotElsewhere(ctx); err != nil {
				return Campaign{}, err
			}
		}
		var froze bool
		if same {
			froze, err = g.freezeSame(ctx, srcTable)
		} else {
			froze, err = g.freezeStream(ctx, src, srcTable)
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40001" && attempt < 5 {
			continue // another run froze the campaign meanwhile: read its row
		}
		if err != nil {
			return Campaign{}, fmt.Errorf("freeze targets of campaign %s into %s: %w; nothing was frozen, the next run freezes again", g.campaign, g.t.targets, err)
		}
		if !froze {
			continue
		}
		if _, err := g.conn.Exec(ctx, "ANALYZE "+g.t.targets); err != nil {
			return Campaign{}, fmt.Errorf("analyze %s: %w", g.t.targets, err)
		}
		c, _, err = g.Load(ctx)
		c.Frozen = true
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
// parameter n when the where clause uses it.
func (g *Grants) selectKeys(srcTable config.Table, prefix string, n int) (string, bool) {
	q := "SELECT " + prefix + pgutil.IdentList("", g.keyNames()) + " FROM " + pgutil.Qualified(srcTable.Schema, srcTable.Name)
	where, bound := BindAsOf(strings.TrimSpace(g.cfg.Source.Where), n)
	if where != "" {
		q += " WHERE (" + where + ")"
	}
	return q, bound
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

// freezeSame freezes in one REPEATABLE READ transaction of the sink (which
// is also the source, read with the source's rights: see sameRights), so
// as_of and the snapshot the targets are read in are taken together. It
// reports false when another run froze first.
func (g *Grants) freezeSame(ctx context.Context, srcTable config.Table) (bool, error) {
	tx, err := g.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var asOf string
	if err := tx.QueryRow(ctx, "SELECT now()::text").Scan(&asOf); err != nil {
		return false, err
	}
	ok, err := g.insertCampaign(ctx, tx, srcTable, asOf)
	if err != nil || !ok {
		return false, err
	}
	sel, bound := g.selectKeys(srcTable, "$1, ", 2)
	args := []any{g.campaign}
	if bound {
		args = append(args, asOf)
	}
	tag, err := tx.Exec(ctx, "INSERT INTO "+g.t.targets+" (campaign_id, "+pgutil.IdentList("", g.keyNames())+") "+sel, args...)
	if err != nil {
		return false, err
	}
	if err := g.setTargets(ctx, tx, tag.RowsAffected()); err != nil {
		return false, err
	}
	// Durable whatever the sink's synchronous_commit: a crash must not let
	// a later run freeze again at another as_of.
	if err := pgutil.Durable(ctx, tx); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// freezeStream freezes across databases: as_of and the keys come from one
// REPEATABLE READ snapshot of the source, and the keys are streamed with
// COPY into the targets table inside the sink transaction that inserts the
// campaign row.
func (g *Grants) freezeStream(ctx context.Context, src *pgx.Conn, srcTable config.Table) (bool, error) {
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
	sel, bound := g.selectKeys(srcTable, "", 1)
	var params [][]byte
	if bound {
		params = [][]byte{[]byte(asOf)}
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		done <- streamKeys(sctx, src, sel, params, g.campaign, pw)
	}()
	tag, err := tx.Conn().PgConn().CopyFrom(ctx, pr, "COPY "+g.t.targets+" (campaign_id, "+pgutil.IdentList("", g.keyNames())+") FROM STDIN")
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
	if err := g.setTargets(ctx, tx, tag.RowsAffected()); err != nil {
		return false, err
	}
	// Durable whatever the sink's synchronous_commit: a crash must not let
	// a later run freeze again at another as_of.
	if err := pgutil.Durable(ctx, tx); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// streamKeys writes the keys the source query returns to w in COPY text
// format, each prefixed by the campaign, and closes w.
func streamKeys(ctx context.Context, src *pgx.Conn, q string, params [][]byte, campaign string, w *io.PipeWriter) error {
	var buf bytes.Buffer
	var werr error
	rr := src.PgConn().ExecParams(ctx, q, params, nil, nil, nil)
	row := make([][]byte, 0, 4)
	for rr.NextRow() {
		if werr != nil {
			continue
		}
		row = append(row[:0], []byte(campaign))
		row = append(row, rr.Values()...)
		pgutil.AppendCopyText(&buf, [][][]byte{row})
		if buf.Len() >= 256<<10 {
			_, werr = w.Write(buf.Bytes())
			buf.Reset()
		}
	}
	_, err := rr.Close()
	if err == nil && werr == nil && buf.Len() > 0 {
		_, werr = w.Write(buf.Bytes())
	}
	if err == nil {
		err = werr
	}
	w.CloseWithError(err) // nil closes with io.EOF: the end of the COPY data
	return err
}

func (g *Grants) setTargets(ctx context.Context, tx pgx.Tx, n int64) error {
	_, err := tx.Exec(ctx, "UPDATE "+g.t.campaigns+" SET targets = $2 WHERE campaign_id = $1", g.campaign, n)
	return err
}

// analyzeIfNever analyzes the targets table when it has no statistics yet
// (a run killed between the freeze and its ANALYZE), so that the keyset
// pages use the primary key instead of sorting every page.
func (g *Grants) analyzeIfNever(ctx context.Context) error {
	var never bool
	if err := g.conn.QueryRow(ctx, "SELECT reltuples < 0 FROM pg_class WHERE oid = to_regclass($1)", g.t.targets).Scan(&never); err != nil {
		return fmt.Errorf("read statistics of %s: %w", g.t.targets, err)
	}
	if !never {
		return nil
	}
	if _, err := g.conn.Exec(ctx, "ANALYZE "+g.t.targets); err != nil {
		return fmt.Errorf("analyze %s: %w", g.t.targets, err)
	}
	return nil
}
