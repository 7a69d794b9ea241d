package reconcile_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/reconcile"
)

// exactTable holds, one per row, values that PostgreSQL's = calls equal to
// other spellings of them (the drifts below). Row 20 holds a NaN made by
// arithmetic, whose bits differ from those of 'NaN'.
const exactTable = `
CREATE TYPE public.pair AS (a numeric, b text);
CREATE TABLE public.t (
  id int PRIMARY KEY, updated_at timestamptz,
  n numeric, j json, jb jsonb, na numeric[], f8 float8, f4 float4, iv interval,
  tt timetz, co public.pair, nr numrange, bp bpchar, ci %s
);
INSERT INTO public.t (id, updated_at, n, j, jb, na, f8, f4, iv, tt, co, nr, bp, ci)
SELECT g, '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second', 1.0, '{"a": 1, "b": 2}', '{"a": 1.0}', '{1,2}',
  0, 0, '1 day', '12:00+01', '(1.0,x)', '[1.0,2.0)', 'a', 'Abc'
FROM generate_series(1, 30) g;
UPDATE public.t SET f8 = 'Infinity'::float8 * 0 WHERE id = 20;`

// drift is a value of column col (of type typ) that PostgreSQL's =
// calls equal to the source's value from but whose text differs, given to
// the row with key id.
type drift struct {
	id            int
	col, typ      string
	from, to      string
	differentByEq bool // = tells these apart too
}

var drifts = []drift{
	{1, "n", "numeric", "1.0", "1.000000", false},
	{2, "j", "jsonb", `{"a": 1, "b": 2}`, `{"b": 2, "a": 1}`, false}, // key order (json has no =: as jsonb)
	{3, "j", "jsonb", `{"a": 1, "b": 2}`, `{"a":1,"b":2}`, false},    // spacing
	{4, "j", "jsonb", `{"a": 1, "b": 2}`, `{"a": 0, "a": 1, "b": 2}`, false},
	{5, "jb", "jsonb", `{"a": 1.0}`, `{"a": 1.00}`, false},
	{6, "na", "numeric[]", "{1,2}", "{1.0,2.0}", false},
	{7, "f8", "float8", "0", "-0", false},
	{8, "f4", "float4", "0", "-0", false},
	{9, "iv", "interval", "1 day", "24 hours", false},
	{10, "tt", "timetz", "12:00+01", "11:00+00", true},
	{11, "co", "public.pair", "(1.0,x)", "(1.00,x)", false},
	{12, "nr", "numrange", "[1.0,2.0)", "[1.00,2.0)", false},
	{13, "bp", "bpchar", "a", "a ", false},
	{14, "ci", "citext", "Abc", "abc", false}, // when the server has citext
}

// set is the SET clause of d.
func (d drift) set() string { return d.col + " = " + quote(d.to) }

// checkDrifts fails unless = calls each drift (but timetz's) equal to the
// source's value: else the tests below would not test what they say.
func checkDrifts(t *testing.T, db *pgtest.DB, citext bool) {
	t.Helper()
	for _, d := range drifts {
		if d.col == "ci" && !citext {
			continue
		}
		var eq bool
		if err := db.Pool.QueryRow(context.Background(), fmt.Sprintf("SELECT %s::%s = %s::%[2]s", quote(d.from), d.typ, quote(d.to))).Scan(&eq); err != nil {
			t.Fatal(err)
		}
		if eq == d.differentByEq {
			t.Errorf("%s %q = %q is %v", d.typ, d.from, d.to, eq)
		}
	}
}

// newExactFixture syncs exactTable to a copy; citext says whether the
// column ci is citext (else text).
func newExactFixture(t *testing.T) (f *fixture, citext bool) {
	t.Helper()
	f = &fixture{src: pgtest.NewDB(t), dst: pgtest.NewDB(t)}
	citext = true
	for _, db := range []*pgtest.DB{f.src, f.dst} {
		if _, err := db.Pool.Exec(context.Background(), "CREATE EXTENSION IF NOT EXISTS citext"); err != nil {
			t.Logf("no citext on this server (%v): ci is text", err)
			citext = false
		}
	}
	ci := "text"
	if citext {
		ci = "citext"
	}
	f.src.Exec(t, fmt.Sprintf(exactTable, ci))
	f.configure(t, fmt.Sprintf(`name: exact
source:
  dsn: %s
  table: public.t
  cursor: [updated_at, id]
sink:
  dsn: %s
  table: public.t
  key: [id]
`, f.src.URL, f.dst.URL))
	return f, citext
}

// TestReconcileComparesTextExactly drifts the copy to values that
// PostgreSQL compares as equal to the source's but whose text differs:
// reconcile reports each, the repair rewrites each, and the copy then
// holds the source's text row by row. A NaN with other bits but the same
// text is no difference.
func TestReconcileComparesTextExactly(t *testing.T) {
	f, citext := newExactFixture(t)
	if rep := f.reconcile(t, reconcile.Options{}); !rep.Clean() {
		t.Errorf("the synced copy is not equal: %+v", rep)
	}
	checkDrifts(t, f.dst, citext)
	var want []string
	for _, d := range drifts {
		if d.col == "ci" && !citext {
			continue
		}
		f.dst.Exec(t, fmt.Sprintf("UPDATE public.t SET %s WHERE id = %d", d.set(), d.id))
		want = append(want, fmt.Sprint(d.id))
	}
	f.dst.Exec(t, "UPDATE public.t SET f8 = 'NaN' WHERE id = 20")

	rep := f.reconcile(t, reconcile.Options{})
	assertCounts(t, rep, 0, 0, int64(len(want)))
	assertKeys(t, "changed", rep.Keys.Changed, want...)

	rep = f.reconcile(t, reconcile.Options{Repair: true})
	assertCounts(t, rep, 0, 0, int64(len(want)))
	if r := rep.Repair; r == nil || r.Updated != int64(len(want)) || r.Inserted != 0 || r.Deleted != 0 {
		t.Errorf("repair wrote %+v; want %d updated", r, len(want))
	}
	if !rep.Repaired || rep.After == nil || !rep.After.Equal() || !rep.Clean() {
		t.Fatalf("the repair left differences: %+v", rep.After)
	}
	if rep := f.reconcile(t, reconcile.Options{}); !rep.Clean() {
		t.Fatalf("the next reconcile is not clean: %+v", rep)
	}
	assertSameText(t, f)
}

// quote is s as an SQL string constant.
func quote(s string) string {
	out := []byte{'\''}
	for _, c := range []byte(s) {
		if c == '\'' {
			out = append(out, '\'')
		}
		out = append(out, c)
	}
	return string(append(out, '\''))
}

// TestSyncCopiesValuesEqualButNotSame updates source rows to values that
// PostgreSQL compares as equal to the copy's but whose text differs, in
// rows with a NULL cursor (every run copies them again, with the same
// cursor): the next sync writes them, and the copy holds the source's text
// row by row.
func TestSyncCopiesValuesEqualButNotSame(t *testing.T) {
	f, citext := newExactFixture(t)
	checkDrifts(t, f.src, citext)
	f.src.Exec(t, "UPDATE public.t SET updated_at = NULL WHERE id <= $1", len(drifts))
	f.sync(t)
	assertSameText(t, f)
	n := 0
	for _, d := range drifts {
		if d.col == "ci" && !citext {
			continue
		}
		f.src.Exec(t, fmt.Sprintf("UPDATE public.t SET %s WHERE id = %d", d.set(), d.id))
		n++
	}
	// The extra pass reads every NULL-cursor row again and writes the 14
	// whose text changed.
	if res := f.sync(t); res.OutsideRows != int64(len(drifts)) || res.OutsideWritten != int64(n) {
		t.Errorf("the sync read %d rows with a NULL cursor and wrote %d, want %d and %d", res.OutsideRows, res.OutsideWritten, len(drifts), n)
	}
	assertSameText(t, f)
	if rep := f.reconcile(t, reconcile.Options{}); !rep.Clean() {
		t.Fatalf("reconcile after the sync: %+v", rep)
	}
}

// assertSameText compares the source and the copy row by row by their
// text output.
func assertSameText(t *testing.T, f *fixture) {
	t.Helper()
	q := "SELECT t::text FROM public.t t ORDER BY id"
	a, b := queryStrings(t, f.src, q), queryStrings(t, f.dst, q)
	if len(a) != len(b) {
		t.Fatalf("the source has %d rows, the copy %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("row %d differs:\n source %s\n copy   %s", i+1, a[i], b[i])
		}
	}
}

// TestReconcileNumericKeySpelling drifts a numeric key of the copy to
// another scale (1.0 to 1.00): the copy then lacks the source's key 1.0
// and holds a key 1.00 the source does not have. The repair deletes the
// one and inserts the other, and the copy holds the source's text.
func TestReconcileNumericKeySpelling(t *testing.T) {
	f := newSimple(t, `
CREATE TABLE public.t (k numeric PRIMARY KEY, updated_at timestamptz NOT NULL, v text);
INSERT INTO public.t SELECT round(g / 2.0, 1), '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second', 'v' || g FROM generate_series(1, 20) g;`, `name: numkey
source:
  dsn: %[1]s
  table: public.t
  cursor: [updated_at, k]
sink:
  dsn: %[2]s
  table: public.t
  key: [k]
`)
	if rep := f.reconcile(t, reconcile.Options{}); !rep.Clean() {
		t.Fatalf("the synced copy is not equal: %+v", rep)
	}
	f.dst.Exec(t, "UPDATE public.t SET k = 1.00 WHERE k = 1.0")
	rep := f.reconcile(t, reconcile.Options{Repair: true})
	assertCounts(t, rep, 1, 1, 0)
	assertKeys(t, "missing", rep.Keys.Missing, "1.0")
	assertKeys(t, "extra", rep.Keys.Extra, "1.00")
	if !rep.Repaired || rep.After == nil || !rep.After.Equal() || !rep.Clean() {
		t.Fatalf("the repair left differences: %+v", rep.After)
	}
	q := "SELECT t::text FROM public.t t ORDER BY k"
	if a, b := queryStrings(t, f.src, q), queryStrings(t, f.dst, q); !slices.Equal(a, b) {
		t.Fatalf("the copy differs from the source after the repair:\n source %q\n copy   %q", a, b)
	}
}
