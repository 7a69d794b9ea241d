package coupon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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

	grantSQL, progressSQL string
	spanSQL, firstSpanSQL [2]string // around the LIMIT
	// The statements that grant a span: [0] a plain INSERT, [1] the same
	// with ON CONFLICT DO NOTHING (see Apply).
	spanGrantSQL, firstSpanGrantSQL [2]string
	// conflicted is set once a span's plain INSERT met a grant that
	// already existed: the rest of the run uses ON CONFLICT.
	conflicted bool
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
	// A span is at most LIMIT targets after the key $2.. (none: from the
	// first), read from the primary key in order; the row returned is its
	// last key with the number of targets in it.
	sel := "SELECT " + list + " FROM " + g.t.targets + " WHERE campaign_id = $1"
	order := " ORDER BY " + list + " LIMIT "
	desc := make([]string, n)
	texts := make([]string, n)
	for i := range g.keys {
		desc[i] = "s." + cols[i] + " DESC" // s.: the column, not the output's text
		texts[i] = cols[i] + "::text"
	}
	span := func(where string) [2]string {
		return [2]string{"SELECT " + strings.Join(texts, ", ") + ", count(*) OVER () FROM (" + sel + where + order,
			") s ORDER BY " + strings.Join(desc, ", ") + " LIMIT 1"}
	}
	g.firstSpanSQL = span("")
	g.spanSQL = span(" AND " + keyTuple(cols) + " > " + keyTuple(after))

	// A span's grants: one INSERT ... SELECT from the frozen targets up to
	// its last key ($2..) after the key it starts after ($n+2..), in key
	// order (two runs at once lock the keys in the same order), ON
	// CONFLICT DO NOTHING. No key travels through syncd.
	upTo := make([]string, n)
	from := make([]string, n)
	for i := range g.keys {
		upTo[i] = g.cast(i+2, i)
		from[i] = g.cast(n+i+2, i)
	}
	ins := "INSERT INTO " + g.t.grants + " (campaign_id, " + list + ", granted_at) SELECT $1, " + pgutil.IdentList("t.", names) +
		", now() FROM " + g.t.targets + " t WHERE t.campaign_id = $1 AND " + keyTuple(prefixed("t.", cols)) + " <= " + keyTuple(upTo)
	order = " ORDER BY " + pgutil.IdentList("t.", names)
	conflict := order + " ON CONFLICT (campaign_id, " + list + ") DO NOTHING"
	g.firstSpanGrantSQL = [2]string{ins + order, ins + conflict}
	rest := ins + " AND " + keyTuple(prefixed("t.", cols)) + " > " + keyTuple(from)
	g.spanGrantSQL = [2]string{rest + order, rest + conflict}
}

// prefixed returns each of cols with prefix before it.
func prefixed(prefix string, cols []string) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = prefix + c
	}
	return out
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
// time or an earlier batch) is left as it is. A page with a span (a run's
// grant page, see ReadSpan) carries no keys: its targets are granted by one
// INSERT ... SELECT from the targets table on the server. Written counts
// new grants. The commit is durable (pgutil.DurableSQL), so the progress
// cursor, the state file and the log never get ahead of the grants on disk.
//
// The page is applied within sink.page_timeout; when ctx ends or the
// deadline passes, the statement in flight is cancelled and the page rolls
// back.
func (g *Grants) Apply(ctx context.Context, p page.Page) (sink.Result, error) {
	if p.Len() == 0 {
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
	if p.Span != nil && !g.conflicted {
		res, err := g.applyOnce(ctx, p, false)
		if !isUniqueViolation(err) {
			return res, err
		}
		g.conflicted = true
	}
	return g.applyOnce(ctx, p, true)
}

// isUniqueViolation reports whether err is a unique_violation (23505).
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// applyOnce applies p in one transaction; a span's grants skip the keys
// already granted only when onConflict is set.
func (g *Grants) applyOnce(ctx context.Context, p page.Page, onConflict bool) (sink.Result, error) {
	var grantSQL string
	var grantArgs []any
	last := p.Last
	if p.Span != nil {
		grantSQL, grantArgs = g.spanGrant(p, onConflict)
	} else {
		var arrays [][]string
		arrays, last = g.keysOf(p)
		grantSQL, grantArgs = g.grantSQL, []any{g.campaign}
		for _, a := range arrays {
			grantArgs = append(grantArgs, a)
		}
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
		b.Queue(grantSQL, grantArgs...).Exec(func(tag pgconn.CommandTag) error {
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

// spanGrant is the statement that grants the targets of a span page and
// its arguments.
func (g *Grants) spanGrant(p page.Page, onConflict bool) (string, []any) {
	i := 0
	if onConflict {
		i = 1
	}
	args := []any{g.campaign}
	for _, v := range p.Last {
		args = append(args, v)
	}
	if p.Span.After == nil {
		return g.firstSpanGrantSQL[i], args
	}
	for _, v := range p.Span.After {
		args = append(args, v)
	}
	return g.spanGrantSQL[i], args
}

// ReadSpan reads where the next grant page ends: the last of at most limit
// frozen targets after the key after (nil: from the first), in key order,
// and how many targets that is. The page it returns carries no keys (its
// Span says the range): Apply grants them on the server.
func (g *Grants) ReadSpan(ctx context.Context, after []string, limit int) (page.Page, error) {
	q := g.spanSQL
	params := [][]byte{[]byte(g.campaign)}
	if after == nil {
		q = g.firstSpanSQL
	}
	for _, v := range after {
		params = append(params, []byte(v))
	}
	p := page.Page{Span: &page.Span{After: after}}
	rr := g.conn.PgConn().ExecParams(ctx, q[0]+strconv.Itoa(limit)+q[1], params, nil, nil, nil)
	for rr.NextRow() {
		vals := rr.Values()
		p.Last = make([]string, len(g.keys))
		for i := range g.keys {
			p.Last[i] = string(vals[i])
		}
		n, err := strconv.Atoi(string(vals[len(g.keys)]))
		if err != nil {
			rr.Close()
			return page.Page{}, fmt.Errorf("read targets of campaign %s from %s: count %q: %w", g.campaign, g.t.targets, vals[len(g.keys)], err)
		}
		p.Span.Count = n
	}
	if _, err := rr.Close(); err != nil {
		return page.Page{}, fmt.Errorf("read targets of campaign %s from %s: %w", g.campaign, g.t.targets, err)
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
