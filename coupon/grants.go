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
	"github.com/syncd/syncd/internal/pgpool"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/plan"
	"github.com/syncd/syncd/sink"
)

// Grants is the coupon_grants sink: it grants the keys of each page once,
// in one transaction with the campaign's progress cursor.
type Grants struct {
	conn     *pgx.Conn
	sess     *pgpool.Session
	cfg      *config.Config
	campaign string
	t        tables
	keys     []page.Column // the key columns, in sink.key order
	keyIdx   []int         // their positions in a page's rows
	written  int64         // new grants made through this sink
	test     plan.TestSignals
	stop     <-chan struct{} // the run's graceful stop (plan.Options.Stop)

	grantSQL, progressSQL string
	// lockSQL locks the campaign's row: every transaction that grants
	// (a page, a repair) takes it before its first grant, so two of them
	// never insert the same keys at once.
	lockSQL              string
	spanSQL, positionSQL string
	// The statements that grant a span: [0] a plain INSERT, [1] the same
	// with ON CONFLICT DO NOTHING (see Apply).
	spanGrantSQL [2]string
	// conflicted is set once a span's plain INSERT met a grant that
	// already existed: the rest of the run uses ON CONFLICT.
	conflicted bool
	// frozenPage is the grant page that the freeze committed with the
	// campaign (freezeInDB), and frozenWritten its new grants: the run
	// reads it first, and Apply reports it without writing it again.
	frozenPage     *page.Page
	frozenWritten  int64
	frozenReported bool
}

var (
	_ sink.Sink       = (*Grants)(nil)
	_ sink.LockHolder = (*Grants)(nil)
)

// Conn is the session every statement of the campaign runs on; it holds
// the run lock (sink.LockHolder), so a run that loses it stops writing.
func (g *Grants) Conn() *pgx.Conn { return g.conn }

// Open connects to the sink database of c (a coupon_grants sink), or
// takes a session of the context's pool (see package pgpool).
func Open(ctx context.Context, c *config.Config) (*Grants, error) {
	t, err := tablesOf(c)
	if err != nil {
		return nil, err
	}
	sess, err := sink.OpenSession(ctx, c)
	if err != nil {
		return nil, err
	}
	return &Grants{conn: sess.Conn, sess: sess, cfg: c, campaign: c.Sink.Campaign, t: t}, nil
}

// ReleasesLocks reports whether Close releases the run lock taken on the
// grants session, as sink.Postgres.ReleasesLocks does.
func (g *Grants) ReleasesLocks() bool { return g.sess.ReleasesLocks() }

// Close gives the session back to its pool (unless the run marked it
// broken, see pgpool.Broken), or closes it.
func (g *Grants) Close(ctx context.Context) error { return g.sess.Release(ctx, "") }

// explain names the campaign's tables in a lock timeout or a page deadline
// (see sink.Explain); ctx is the page's, or the caller's outside a page.
func (g *Grants) explain(ctx context.Context, err error) error {
	t := g.t.grantsName
	names := []string{t.String(),
		config.Table{Schema: t.Schema, Name: t.Name + ChunksSuffix}.String(),
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
	// behind leaves the stored cursor alone. When the stored cursor is the
	// key the page starts after ($n+3), no other run moved it and the page
	// ends after it in the frozen order. Only otherwise are the keys
	// compared, in the sink's order of the key type, which for text is
	// the grants table's collation and may differ from the source's, in
	// which the targets were frozen: compared alone it kept the cursor of
	// a single run behind, and every later run read those pages again.
	stored := make([]string, n)
	fresh := make([]string, n)
	for i, k := range g.keys {
		stored[i] = fmt.Sprintf("cursor[%d]::%s", i+1, k.Type)
		fresh[i] = g.cast(i+3, i)
	}
	g.progressSQL = "UPDATE " + g.t.campaigns + " SET cursor = $2::text[], pages = pages + 1, updated_at = now()" +
		fmt.Sprintf(" WHERE campaign_id = $1 AND (cursor IS NULL OR cursor = $%d::text[] OR ", n+3) + keyTuple(stored) + " < " + keyTuple(fresh) + ")"

	// A span is the targets at positions From+1 .. To of the campaign's
	// frozen order. Where it ends: the position To (at most $2+$3, at most
	// the last target) and the key there. The chunks follow each other
	// (ensureChunks checked it), so the last target is the end of the last
	// chunk and To is in the last chunk that starts before it: each is one
	// row read backwards by the primary key. (A max over the campaign's
	// chunks and a join on first_pos < To read every chunk before To, and
	// every page of a long campaign in small chunks read more of them.)
	arrs := g.keyArrays()
	at := make([]string, n)
	for i, a := range arrs {
		at[i] = "c." + a + "[e.to_pos - c.first_pos]"
	}
	g.spanSQL = "SELECT e.to_pos, " + strings.Join(at, ", ") +
		" FROM (SELECT least($2::bigint + $3::bigint, (SELECT l.first_pos + l.n FROM " + g.t.chunks + " l WHERE l.campaign_id = $1 ORDER BY l.first_pos DESC LIMIT 1)) AS to_pos) e" +
		" JOIN LATERAL (SELECT * FROM " + g.t.chunks + " c WHERE c.campaign_id = $1 AND c.first_pos < e.to_pos ORDER BY c.first_pos DESC LIMIT 1) c ON e.to_pos <= c.first_pos + c.n"

	// A span's grants: one INSERT ... SELECT of the keys at positions $2+1
	// .. $3 from the chunks that hold them. No key travels through syncd.
	// The first of those chunks is the last that starts at or before $2:
	// bounded on both sides, the chunks are a range of the primary key.
	// No ORDER BY: two runs at once cannot deadlock on the keys, because
	// each page transaction locks the campaign's row first (lockSQL), and
	// sorting a page of 50,000 keys by position cost 20-30 ms of it. The
	// keys still come in the frozen order in practice (the chunks by their
	// primary key, each chunk's array in order), which keeps the grants'
	// index appending.
	vals := make([]string, n)
	for i, k := range g.keys {
		vals[i] = "u." + arrs[i] + "::" + k.Type
	}
	ins := "INSERT INTO " + g.t.grants + " (campaign_id, " + list + ", granted_at) SELECT $1, " + strings.Join(vals, ", ") + ", now() FROM " + g.t.chunks +
		" c, unnest(" + pgutil.IdentList("c.", arrs) + ") WITH ORDINALITY AS u(" + strings.Join(arrs, ", ") + ", syncd_ord)" +
		" WHERE c.campaign_id = $1 AND c.first_pos >= (SELECT coalesce(max(s.first_pos), 0) FROM " + g.t.chunks + " s WHERE s.campaign_id = $1 AND s.first_pos <= $2)" +
		" AND c.first_pos < $3 AND c.first_pos + c.n > $2 AND c.first_pos + u.syncd_ord > $2 AND c.first_pos + u.syncd_ord <= $3"
	g.spanGrantSQL = [2]string{ins, ins + " ON CONFLICT (campaign_id, " + list + ") DO NOTHING"}
	g.lockSQL = "SELECT FROM " + g.t.campaigns + " WHERE campaign_id = $1 FOR UPDATE"

	// The position of a key (the progress cursor): text compared with text.
	eq := make([]string, n)
	for i, a := range arrs {
		eq[i] = fmt.Sprintf("u.%s = $%d", a, i+2)
	}
	g.positionSQL = "SELECT c.first_pos + u.syncd_ord FROM " + g.t.chunks + " c, unnest(" + pgutil.IdentList("c.", arrs) + ") WITH ORDINALITY AS u(" +
		strings.Join(arrs, ", ") + ", syncd_ord) WHERE c.campaign_id = $1 AND " + strings.Join(eq, " AND ")
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
	if g.frozenPage != nil && p.Span == g.frozenPage.Span {
		// Committed by the freeze, in one transaction with the campaign.
		return sink.Result{Written: g.frozenWritten}, nil
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
	var after any // the key the page starts after, when it is a span
	if p.Span != nil && p.Span.After != nil {
		after = p.Span.After
	}
	progressArgs = append(progressArgs, after)
	var res sink.Result
	err := pgx.BeginFunc(ctx, g.conn, func(tx pgx.Tx) error {
		// One round trip. The state file follows this commit, and a run
		// reports the campaign done after it: it must survive a crash of
		// the sink's server whatever synchronous_commit its configuration
		// sets (pgutil.DurableSQL). The campaign's row is locked first:
		// a second run's page waits for this one, then finds its keys
		// granted (see apply).
		b := &pgx.Batch{}
		b.Queue(g.lockSQL, g.campaign)
		b.Queue(grantSQL, grantArgs...).Exec(func(tag pgconn.CommandTag) error {
			res.Written = tag.RowsAffected()
			return nil
		})
		b.Queue(g.progressSQL, progressArgs...)
		b.Queue(pgutil.DurableSQL)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("insert grants and save progress: %w", err)
		}
		return g.test.BeforeCommit.Fire(ctx, g.campaign)
	})
	if err != nil {
		return sink.Result{}, fmt.Errorf("grant page of campaign %s into %s: %w", g.campaign, g.t.grantsName, err)
	}
	g.written += res.Written
	return res, nil
}

// sortMemSQL raises work_mem to 32MB for the rest of the transaction
// (never lowers it): the freeze sorts the targets into the frozen order,
// and with the 4MB default a sort of 50,000 keys spilled to disk (60 ms
// of a 250 ms page, when grant pages still sorted their keys).
const sortMemSQL = "SELECT set_config('work_mem', '32MB', true) WHERE pg_size_bytes(current_setting('work_mem')) < 32 * 1024 * 1024"

// noParallelSQL turns parallel plans off for the rest of the transaction:
// freezeArraysSQL's arrays take the order of one sorted stream.
const noParallelSQL = "SELECT set_config('max_parallel_workers_per_gather', '0', true)"

// fewRowsSQL reports whether the table $1 holds at most $2 rows, by the
// planner's estimate (its rows per page at the last ANALYZE times its
// pages now), or, never analyzed, by the most rows its pages can hold. A
// view, a partitioned table or one with inheritance children reports
// false. It decides whether the freeze builds its targets as arrays
// (freezeArraysSQL).
const fewRowsSQL = `SELECT coalesce((SELECT CASE
    WHEN c.reltuples >= 0 AND c.relpages > 0 THEN c.reltuples / c.relpages * p.pages
    ELSE p.pages * ((current_setting('block_size')::int - 24) / 28) END <= $2
  FROM pg_class c, LATERAL (SELECT pg_relation_size(c.oid) / current_setting('block_size')::int AS pages) p
  WHERE c.oid = to_regclass($1) AND c.relkind IN ('r', 'm') AND NOT c.relhassubclass), false)`

// spanGrant is the statement that grants the targets of a span page and
// its arguments.
func (g *Grants) spanGrant(p page.Page, onConflict bool) (string, []any) {
	i := 0
	if onConflict {
		i = 1
	}
	return g.spanGrantSQL[i], []any{g.campaign, p.Span.From, p.Span.From + int64(p.Span.Count)}
}

// ReadSpan reads where the next grant page ends: the position and key of
// the last of at most limit frozen targets after position from (0: from
// the first). The page it returns carries no keys (its Span says the
// range): Apply grants them on the server.
func (g *Grants) ReadSpan(ctx context.Context, after []string, from int64, limit int) (page.Page, error) {
	p := page.Page{Span: &page.Span{After: after, From: from}}
	rr := g.conn.PgConn().ExecParams(ctx, g.spanSQL, [][]byte{[]byte(g.campaign), strconv.AppendInt(nil, from, 10), strconv.AppendInt(nil, int64(limit), 10)}, nil, nil, nil)
	var to int64
	for rr.NextRow() {
		vals := rr.Values()
		var err error
		if to, err = strconv.ParseInt(string(vals[0]), 10, 64); err != nil {
			rr.Close()
			return page.Page{}, fmt.Errorf("read targets of campaign %s from %s: position %q: %w", g.campaign, g.t.chunksName, vals[0], err)
		}
		p.Last = make([]string, len(g.keys))
		for i := range g.keys {
			if vals[i+1] == nil {
				// A chunk lost a key after the run checked the chunks.
				rr.Close()
				return page.Page{}, fmt.Errorf("read targets of campaign %s from %s: no key at position %d (a chunk holds fewer keys than its n says): the frozen targets were changed by hand; restore them (see docs/COUPONS.md) or start a new campaign with a new sink.campaign id", g.campaign, g.t.chunksName, to)
			}
			p.Last[i] = string(vals[i+1])
		}
	}
	if _, err := rr.Close(); err != nil {
		return page.Page{}, fmt.Errorf("read targets of campaign %s from %s: %w", g.campaign, g.t.chunksName, err)
	}
	if to <= from {
		return page.Page{Span: p.Span}, nil
	}
	p.Span.Count = int(to - from)
	return p, nil
}

// position returns the position of key in the campaign's frozen order
// (nil: 0, before the first).
func (g *Grants) position(ctx context.Context, key []string) (int64, error) {
	if key == nil {
		return 0, nil
	}
	args := []any{g.campaign}
	for _, v := range key {
		args = append(args, v)
	}
	var pos int64
	err := g.conn.QueryRow(ctx, g.positionSQL, args...).Scan(&pos)
	if errors.Is(err, pgx.ErrNoRows) {
		// Every run starts here, so the way on must move the cursor: a
		// repair grants what is missing and leaves it where it is. From
		// no cursor the next run walks all targets, and ON CONFLICT keeps
		// the grants made.
		return 0, fmt.Errorf("campaign %s: its progress cursor %v is not among its frozen targets in %s: the targets or the campaign row were changed by hand; restore them, or let the next run start from the first target (%s; the grants made are kept)",
			g.campaign, key, g.t.chunksName, "UPDATE "+g.t.campaigns+" SET cursor = NULL WHERE campaign_id = '"+strings.ReplaceAll(g.campaign, "'", "''")+"'")
	}
	if err != nil {
		return 0, fmt.Errorf("find the progress of campaign %s in %s: %w", g.campaign, g.t.chunksName, err)
	}
	return pos, nil
}
