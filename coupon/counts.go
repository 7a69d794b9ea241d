package coupon

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/plan"
)

// Counts compares the grants of a campaign with its frozen targets.
type Counts = plan.Counts

// match renders "a.k1 = b.k1 AND a.k2 = b.k2".
func (g *Grants) match(a, b string) string {
	parts := make([]string, len(g.keys))
	for i, k := range g.keys {
		parts[i] = a + "." + pgutil.Ident(k.Name) + " = " + b + "." + pgutil.Ident(k.Name)
	}
	return strings.Join(parts, " AND ")
}

// targets is a subquery of the campaign's frozen targets, one row per
// target with the key columns under their own names and types.
func (g *Grants) targets() string {
	arrs := g.keyArrays()
	cols := make([]string, len(g.keys))
	for i, k := range g.keys {
		cols[i] = "u." + arrs[i] + "::" + k.Type + " AS " + pgutil.Ident(k.Name)
	}
	return "(SELECT " + strings.Join(cols, ", ") + " FROM " + g.t.chunks + " c, unnest(" + pgutil.IdentList("c.", arrs) + ") AS u(" +
		strings.Join(arrs, ", ") + ") WHERE c.campaign_id = $1)"
}

func (g *Grants) missingFrom() string {
	return g.targets() + " t WHERE NOT EXISTS (SELECT 1 FROM " + g.t.grants +
		" g WHERE g.campaign_id = $1 AND " + g.match("g", "t") + ")"
}

func (g *Grants) extraFrom() string {
	return g.t.grants + " g WHERE g.campaign_id = $1 AND NOT EXISTS (SELECT 1 FROM " + g.targets() +
		" t WHERE " + g.match("t", "g") + ")"
}

// Count compares grants and targets both ways, each pass in one snapshot:
// first as two ordered arrays (countEqual), which settles the common case
// where they are equal; otherwise one full join of the campaign's targets
// with its grants on the key reads each table once (a hash or merge join,
// whatever the statistics say), where an anti-join each way read each twice
// and, with the grants' statistics stale after a run, probed the targets'
// index once per grant. Granted is
// the number of grant rows, counted apart: in the join a grant matched by
// a key that the chunks hold twice would count twice (see complete).
func (g *Grants) Count(ctx context.Context) (Counts, error) {
	if c, ok, err := g.countEqual(ctx); err != nil || ok {
		return c, err
	}
	var c Counts
	list := pgutil.IdentList("", g.keyNames())
	q := "SELECT count(t.syncd_is_target), (SELECT count(*) FROM " + g.t.grants + " WHERE campaign_id = $1), count(*) FILTER (WHERE g.syncd_is_grant IS NULL), count(*) FILTER (WHERE t.syncd_is_target IS NULL)" +
		" FROM (SELECT " + list + ", true AS syncd_is_target FROM " + g.targets() + " k) t" +
		" FULL JOIN (SELECT " + list + ", true AS syncd_is_grant FROM " + g.t.grants + " WHERE campaign_id = $1) g ON " + g.match("t", "g")
	if err := g.conn.QueryRow(ctx, q, g.campaign).Scan(&c.Targets, &c.Granted, &c.Missing, &c.Extra); err != nil {
		return Counts{}, fmt.Errorf("compare grants of campaign %s with its targets: %w", g.campaign, err)
	}
	return c, nil
}

// keyList returns at most limit keys of from (a FROM clause whose table is
// aliased alias), rendered as text with "," between the parts, in key order.
func (g *Grants) keyList(ctx context.Context, from, alias string, limit int) ([]string, error) {
	parts := make([]string, len(g.keys))
	for i, k := range g.keys {
		parts[i] = alias + "." + pgutil.Ident(k.Name) + "::text"
	}
	q := "SELECT concat_ws(',', " + strings.Join(parts, ", ") + ") FROM " + from +
		" ORDER BY " + pgutil.IdentList(alias+".", g.keyNames()) + fmt.Sprintf(" LIMIT %d", limit)
	rows, err := g.conn.Query(ctx, q, g.campaign)
	if err != nil {
		return nil, fmt.Errorf("list keys of campaign %s: %w", g.campaign, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list keys of campaign %s: %w", g.campaign, err)
	}
	if keys == nil {
		keys = []string{}
	}
	return keys, nil
}

// complete reports whether the campaign is done: every target has a grant,
// every grant is a target, and the targets are as many as the grants, which
// with the first two means that no key is a target twice. The freeze
// writes each key once; a key that the chunks hold twice was copied over
// another by hand, and the member it replaced would go without a grant
// while both ways of the comparison match.
func complete(c Counts) bool { return c.Reconciled() && c.Targets == c.Granted }

// duplicateTargets is the error of counts that are reconciled but not
// complete.
func (g *Grants) duplicateTargets(c Counts) error {
	return fmt.Errorf("campaign %s: its %d targets in %s are only %d distinct keys (a key is a target more than once): the frozen targets were changed by hand, and the members whose keys were overwritten have no grant; restore them (see docs/COUPONS.md) or start a new campaign with a new sink.campaign id: %w",
		g.campaign, c.Targets, g.t.chunksName, c.Granted, ErrNotReconciled)
}

// setOutcome stores the result of a reconcile in the campaign row.
func (g *Grants) setOutcome(ctx context.Context, c Counts) error {
	status := StatusDone
	if !complete(c) {
		status = StatusFailed
	}
	_, err := pgutil.ExecDurable(ctx, g.conn, "UPDATE "+g.t.campaigns+" SET status = $2, granted = $3, missing = $4, extra = $5, updated_at = now() WHERE campaign_id = $1",
		g.campaign, status, c.Granted, c.Missing, c.Extra)
	if err != nil {
		return fmt.Errorf("record the outcome of campaign %s in %s: %w", g.campaign, g.t.campaigns, err)
	}
	return nil
}

// countArraysMax is the most targets, and grants, that countEqual compares
// as arrays: about 8 MB a side for a bigint key, 40 MB for a text key of
// 30 bytes.
var countArraysMax = 1_000_000 // a variable for tests

// countEqual proves, without a join, that the grants of the campaign are
// exactly its frozen targets, the outcome of almost every run: the
// campaign's grant keys, read in the order of the grants' primary key into
// one array per key column of the column's own type, hold each chunk's keys
// at the chunk's positions, and no more keys than the chunks; the chunks
// follow each other from position 0 (each starts where the ones before it
// end). The grants' keys are distinct (their primary key), so this means
// that every target is granted once, no key is a target twice, and no grant
// is left over. Any other outcome, an order of keys the grants table sorts
// otherwise included, reports ok false and Count counts the differences
// with the join. An ordered scan of the grants' index and one cast of each
// chunk's array replace a hash join of every target with every grant (85
// of a 600 ms campaign of 120,000 targets; unnesting the chunks into a
// second array of single keys took 30 more, a slice compare takes 5). The
// arrays are built in the server's memory, outside work_mem: a campaign
// with more than countArraysMax targets goes to the join (which spills),
// checked before any array is built, and the grants' array stops at one
// more than that.
func (g *Grants) countEqual(ctx context.Context) (Counts, bool, error) {
	arrs := g.keyArrays()
	aggs := make([]string, len(g.keys))
	eq := make([]string, len(g.keys))
	for i, k := range g.keys {
		aggs[i] = "array_agg(" + pgutil.Ident(k.Name) + ") AS " + arrs[i]
		eq[i] = "g." + arrs[i] + "[c.first_pos + 1 : c.first_pos + c.n] IS NOT DISTINCT FROM c." + arrs[i] + "::" + k.Type + "[]"
	}
	list := pgutil.IdentList("", g.keyNames())
	q := "SELECT coalesce(cardinality(g." + arrs[0] + "), 0) = s.syncd_total AND s.syncd_follow AND s.syncd_equal, s.syncd_total" +
		" FROM (SELECT " + strings.Join(aggs, ", ") + " FROM (SELECT " + list + " FROM " + g.t.grants + " WHERE campaign_id = $1 ORDER BY " + list + " LIMIT $2 + 1) o) g," +
		" LATERAL (SELECT coalesce(sum(c.n), 0) AS syncd_total, coalesce(bool_and(c.first_pos = c.syncd_before), true) AS syncd_follow," +
		" coalesce(bool_and(" + strings.Join(eq, " AND ") + "), true) AS syncd_equal" +
		" FROM (SELECT first_pos, n, " + strings.Join(arrs, ", ") + ", coalesce(sum(n) OVER (ORDER BY first_pos ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS syncd_before" +
		" FROM " + g.t.chunks + " WHERE campaign_id = $1) c) s" +
		" WHERE (SELECT coalesce(sum(n), 0) FROM " + g.t.chunks + " WHERE campaign_id = $1) <= $2"
	var same bool
	var n int64
	if err := g.conn.QueryRow(ctx, q, g.campaign, countArraysMax).Scan(&same, &n); err != nil {
		var pgErr *pgconn.PgError
		if errors.Is(err, pgx.ErrNoRows) || errors.As(err, &pgErr) {
			return Counts{}, false, nil // too many for arrays, or Count's join says more
		}
		return Counts{}, false, fmt.Errorf("compare grants of campaign %s with its targets: %w", g.campaign, err)
	}
	if !same {
		return Counts{}, false, nil
	}
	return Counts{Targets: n, Granted: n}, true, nil
}
