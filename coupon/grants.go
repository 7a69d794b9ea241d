package coupon

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/plan"
	"github.com/syncd/syncd/sink"
)

// Grants is the coupon_grants sink: it grants the keys of each page once,
// in one transaction with the campaign's progress cursor.
type Grants struct {
	conn     *pgx.Conn
	cfg      *config.Config
	campaign string
	t        tables
	keys     []page.Column // the key columns, in sink.key order
	keyIdx   []int         // their positions in a page's rows
	written  int64         // new grants made through this sink
	test     *plan.TestSignals

	grantSQL, progressSQL, pageSQL, firstSQL string
}

var _ sink.Sink = (*Grants)(nil)

// Open connects to the sink database of c (a coupon_grants sink).
func Open(ctx context.Context, c *config.Config) (*Grants, error) {
	t, err := tablesOf(c)
	if err != nil {
		return nil, err
	}
	conn, err := sink.Connect(ctx, c)
	if err != nil {
		return nil, err
	}
	return &Grants{conn: conn, cfg: c, campaign: c.Sink.Campaign, t: t}, nil
}

// Close closes the connection.
func (g *Grants) Close(ctx context.Context) error { return g.conn.Close(context.WithoutCancel(ctx)) }

// explain names the campaign's tables in a lock timeout or a page deadline
// (see sink.Explain); ctx is the page's, or the caller's outside a page.
func (g *Grants) explain(ctx context.Context, err error) error {
	t := g.t.grantsName
	names := []string{t.String(),
		config.Table{Schema: t.Schema, Name: t.Name + TargetsSuffix}.String(),
		config.Table{Schema: t.Schema, Name: CampaignsTable}.String()}
	return sink.Explain(ctx, g.conn, g.cfg, names, err)
}

func (g *Grants) keyNames() []string {
	out := make([]string, len(g.keys))
	for i, k := range g.keys {
		out[i] = k.Name
	}
	return out
}

// Prepare takes the key columns (sink.key) from cols, which describe the
// rows of every page, and creates the grants, targets and campaigns tables
// when they are missing.
func (g *Grants) Prepare(ctx context.Context, cols []page.Column) error {
	g.keys, g.keyIdx = nil, nil
	for _, name := range g.cfg.Sink.Key {
		i := slices.IndexFunc(cols, func(c page.Column) bool { return c.Name == name })
		if i < 0 {
			return g.cfg.Errorf("sink.key", "key column %q is not among the source columns", name)
		}
		g.keys = append(g.keys, cols[i])
		g.keyIdx = append(g.keyIdx, i)
	}
	if err := g.ensureTables(ctx); err != nil {
		return err
	}
	g.build()
	return nil
}

// cast returns "$n::text::type" for key column i.
func (g *Grants) cast(n, i int) string {
	return fmt.Sprintf("$%d::text::%s", n, g.keys[i].Type)
}

// keyTuple renders "(a, b)" (or "a" for one column) for row-value comparison.
func keyTuple(parts []string) string {
	if len(parts) == 1 {
		return parts[0]
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func (g *Grants) build() {
	names := g.keyNames()
	list := pgutil.IdentList("", names)
	n := len(g.keys)

	arrays := make([]string, n)
	for i, k := range g.keys {
		arrays[i] = fmt.Sprintf("$%d::text[]::%s[]", i+2, k.Type)
	}
	g.grantSQL = "INSERT INTO " + g.t.grants + " (campaign_id, " + list + ", granted_at) SELECT $1, " +
		pgutil.IdentList("u.", names) + ", now() FROM unnest(" + strings.Join(arrays, ", ") + ") AS u(" + list + ")" +
		" ON CONFLICT (campaign_id, " + list + ") DO NOTHING"

	// The progress cursor never moves back: a second run at once that is
	// behind leaves the stored cursor alone.
	stored := make([]string, n)
	fresh := make([]string, n)
	for i, k := range g.keys {
		stored[i] = fmt.Sprintf("cursor[%d]::%s", i+1, k.Type)
		fresh[i] = g.cast(i+3, i)
	}
	g.progressSQL = "UPDATE " + g.t.campaigns + " SET cursor = $2::text[], pages = pages + 1, updated_at = now()" +
		" WHERE campaign_id = $1 AND (cursor IS NULL OR " + keyTuple(stored) + " < " + keyTuple(fresh) + ")"

	after := make([]string, n)
	cols := make([]string, n)
	for i := range g.keys {
		after[i] = g.cast(i+2, i)
		cols[i] = pgutil.Ident(names[i])
	}
	sel := "SELECT " + list + " FROM " + g.t.targets + " WHERE campaign_id = $1"
	order := " ORDER BY " + list + " LIMIT "
	g.firstSQL = sel + order
	g.pageSQL = sel + " AND " + keyTuple(cols) + " > " + keyTuple(after) + order
}

// keysOf returns the key values of a page as one text array per key column,
// and the last row's key.
func (g *Grants) keysOf(p page.Page) ([][]string, []string) {
	arrays := make([][]string, len(g.keys))
	for _, row := range p.Rows {
		for i, idx := range g.keyIdx {
			arrays[i] = append(arrays[i], string(row[idx]))
		}
	}
	last := make([]string, len(g.keys))
	for i := range g.keys {
		last[i] = arrays[i][len(arrays[i])-1]
	}
	return arrays, last
}

// Apply grants the page's keys in one transaction together with the
// campaign's progress cursor: INSERT ... ON CONFLICT (campaign_id, key) DO
// NOTHING, so a key granted before (by an earlier run, a run at the same
// time or an earlier batch) is left as it is. Written counts new grants.
// The commit is durable (pgutil.DurableSQL), so the progress cursor, the
// state file and the log never get ahead of the grants on disk.
//
// The page is applied within sink.page_timeout; when ctx ends or the
// deadline passes, the statement in flight is cancelled and the page rolls
// back.
func (g *Grants) Apply(ctx context.Context, p page.Page) (sink.Result, error) {
	if len(p.Rows) == 0 {
		return sink.Result{}, nil
	}
	if ctx.Err() != nil {
		return sink.Result{}, fmt.Errorf("grant page of campaign %s: not started: %w", g.campaign, context.Cause(ctx))
	}
	pctx, cancel := sink.PageContext(ctx, g.cfg)
	defer cancel()
	res, err := g.apply(pctx, p)
	return res, g.explain(pctx, err)
}

func (g *Grants) apply(ctx context.Context, p page.Page) (sink.Result, error) {
	arrays, last := g.keysOf(p)
	grantArgs := []any{g.campaign}
	for _, a := range arrays {
		grantArgs = append(grantArgs, a)
	}
	progressArgs := []any{g.campaign, last}
	for _, v := range last {
		progressArgs = append(progressArgs, v)
	}
	var res sink.Result
	err := pgx.BeginFunc(ctx, g.conn, func(tx pgx.Tx) error {
		// One round trip. The state file follows this commit, and a run
		// reports the campaign done after it: it must survive a crash of
		// the sink's server whatever synchronous_commit its configuration
		// sets (pgutil.DurableSQL).
		b := &pgx.Batch{}
		b.Queue(g.grantSQL, grantArgs...).Exec(func(tag pgconn.CommandTag) error {
			res.Written = tag.RowsAffected()
			return nil
		})
		b.Queue(g.progressSQL, progressArgs...)
		b.Queue(pgutil.DurableSQL)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("insert grants and save progress: %w", err)
		}
		if g.test != nil && g.test.BeforeCommit != nil {
			return g.test.BeforeCommit(ctx)
		}
		return nil
	})
	if err != nil {
		return sink.Result{}, fmt.Errorf("grant page of campaign %s into %s: %w", g.campaign, g.t.grantsName, err)
	}
	g.written += res.Written
	return res, nil
}

// ReadTargets reads at most limit frozen targets after the key after (nil:
// from the first), in key order, as a page of key columns.
func (g *Grants) ReadTargets(ctx context.Context, after []string, limit int) (page.Page, error) {
	q := g.pageSQL
	params := [][]byte{[]byte(g.campaign)}
	if after == nil {
		q = g.firstSQL
	}
	for _, v := range after {
		params = append(params, []byte(v))
	}
	q += fmt.Sprint(limit)
	var p page.Page
	rr := g.conn.PgConn().ExecParams(ctx, q, params, nil, nil, nil)
	for rr.NextRow() {
		vals := rr.Values()
		row := make([][]byte, len(vals))
		for i, v := range vals {
			row[i] = slices.Clone(v)
		}
		p.Rows = append(p.Rows, row)
	}
	if _, err := rr.Close(); err != nil {
		return page.Page{}, fmt.Errorf("read targets of campaign %s from %s: %w", g.campaign, g.t.targets, err)
	}
	if n := len(p.Rows); n > 0 {
		p.Last = make([]string, len(g.keys))
		for i := range g.keys {
			p.Last[i] = string(p.Rows[n-1][i])
		}
	}
	return p, nil
}

// advances reports whether key b sorts strictly after key a, compared by the
// server with the key's own types.
func (g *Grants) advances(ctx context.Context, a, b []string) (bool, error) {
	left := make([]string, len(g.keys))
	right := make([]string, len(g.keys))
	var args []any
	for i := range g.keys {
		args = append(args, a[i])
		left[i] = g.cast(len(args), i)
	}
	for i := range g.keys {
		args = append(args, b[i])
		right[i] = g.cast(len(args), i)
	}
	var ok bool
	if err := g.conn.QueryRow(ctx, "SELECT "+keyTuple(right)+" > "+keyTuple(left), args...).Scan(&ok); err != nil {
		return false, fmt.Errorf("compare keys of campaign %s: %w", g.campaign, err)
	}
	return ok, nil
}

// flush makes every earlier commit to the sink database durable (the
// freeze, in particular): a durable commit that writes WAL (it rewrites the
// campaign row unchanged) waits for the WAL flush up to its own commit
// record, which covers them all. A commit that writes no WAL (SELECT
// txid_current() alone) would flush nothing.
func (g *Grants) flush(ctx context.Context) error {
	if _, err := pgutil.ExecDurable(ctx, g.conn, "UPDATE "+g.t.campaigns+" SET updated_at = updated_at WHERE campaign_id = $1", g.campaign); err != nil {
		return fmt.Errorf("flush the freeze of campaign %s: %w", g.campaign, err)
	}
	return nil
}
