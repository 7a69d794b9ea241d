package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// pagilaKeys are the primary keys of the 15 tables of testdata/pagila.sql.
var pagilaKeys = map[string][]string{
	"actor": {"actor_id"}, "address": {"address_id"}, "category": {"category_id"}, "city": {"city_id"},
	"country": {"country_id"}, "customer": {"customer_id"}, "film": {"film_id"},
	"film_actor": {"actor_id", "film_id"}, "film_category": {"film_id", "category_id"},
	"inventory": {"inventory_id"}, "language": {"language_id"}, "payment": {"payment_date", "payment_id"},
	"rental": {"rental_id"}, "staff": {"staff_id"}, "store": {"store_id"},
}

// pagila loads the Pagila-like schema into a new source database, and
// returns it with an empty sink database.
func pagila(t *testing.T) (src, dst *pgtest.DB) {
	t.Helper()
	sql, err := os.ReadFile("testdata/pagila.sql")
	if err != nil {
		t.Fatal(err)
	}
	src, dst = pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, string(sql))
	return src, dst
}

// pagilaConfig is one pattern source for the whole schema, with one cursor
// for every table, into pagila_copy.* (a schema the sink lacks); extra is
// added at the end of the file.
const pagilaConfig = `name: pagila
source:
  dsn: ${SYNCD_TEST_SRC}
  table: public.*
  cursor: [last_update]
  lookback: 0s
  page_size: 70
sink:
  dsn: ${SYNCD_TEST_DST}
  table: pagila_copy.*
`

// samePagila fails unless the copy of each table equals its source row by
// row (by its primary key).
func samePagila(t *testing.T, src, dst *pgtest.DB, tables ...string) {
	t.Helper()
	for _, table := range tables {
		if n := (testutil.Compare{Key: pagilaKeys[table]}).RequireEqual(t, src.Pool, "public."+table, dst.Pool, "pagila_copy."+table); n == 0 {
			t.Fatalf("%s is empty: nothing was compared", table)
		}
	}
}

func pagilaTables() []string {
	var out []string
	for table := range pagilaKeys {
		out = append(out, table)
	}
	return out
}

// The whole Pagila-like schema (15 tables, payment partitioned, every
// last_update shared by many rows) syncs from one pattern file whose cursor
// is [last_update]: each table's primary key is appended as its
// tie-breaker, composite ones included, validate says so per table, and
// the first run into an empty sink creates the copies' schema and copies
// every table exactly; rows updated later, tied on last_update with each
// other, follow.
func TestPatternWholeSchema(t *testing.T) {
	src, dst := pagila(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "pagila.yaml", pagilaConfig)
	env := []string{"SYNCD_TEST_SRC=" + src.URL, "SYNCD_TEST_DST=" + dst.URL, "SYNCD_STATE=" + filepath.Join(dir, "state.db")}

	r := bin.Run(t, env, "validate", "--config", cfg)
	if r.Code != 0 {
		t.Fatalf("validate: exit %d, want 0\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	for _, want := range []string{
		"pagila: pattern public.* matches 15 tables to sync: pagila.actor, pagila.address,",
		"pagila.film: cursor last_update, film_id (primary key appended as the tie-breaker)\n",
		"pagila.film_actor: cursor last_update, actor_id, film_id (primary key appended as the tie-breaker)\n",
		"pagila.film_category: cursor last_update, film_id, category_id (primary key appended as the tie-breaker)\n",
		"pagila.payment: cursor last_update, payment_date, payment_id (primary key appended as the tie-breaker)\n",
		"pagila.film: ok (public.film, 12 columns, cursor last_update, film_id,",
		"pagila.store: warning: sink table pagila_copy.store does not exist yet; the first run creates it",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Fatalf("validate's output lacks %q:\n%s", want, r.Stdout)
		}
	}
	if n := strings.Count(r.Stdout, "(primary key appended as the tie-breaker)\n"); n != 15 {
		t.Fatalf("validate names %d tables' cursors, want 15:\n%s", n, r.Stdout)
	}
	if n := count(t, dst, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pagila_copy'"); n != 0 {
		t.Fatal("validate created the copies' schema")
	}

	r = bin.Run(t, env, "run", "--once", "--config", cfg)
	if r.Code != 0 {
		t.Fatalf("run --once: exit %d, want 0\n%s", r.Code, r.Stderr)
	}
	samePagila(t, src, dst, pagilaTables()...)
	if n := count(t, dst, "SELECT count(*) FROM pg_tables WHERE schemaname = 'pagila_copy'"); n != 15 {
		t.Fatalf("pagila_copy holds %d tables, want 15 (the partitions of payment are not copied)", n)
	}

	// Later changes, many of them tied on last_update, follow.
	src.Exec(t, `UPDATE film_actor SET last_update = now() WHERE actor_id <= 60`)
	src.Exec(t, `INSERT INTO film_actor SELECT a, f, now() FROM generate_series(1, 50) a, generate_series(401, 403) f ON CONFLICT DO NOTHING`)
	src.Exec(t, `UPDATE film SET title = title || ' (restored)', last_update = now() WHERE film_id % 7 = 0`)
	src.Exec(t, `INSERT INTO payment SELECT g, 1, 1, 1, 9.99, '2022-03-20 00:00:00+00'::timestamptz + g * interval '1 s', now() FROM generate_series(1001, 1150) g`)
	r = bin.Run(t, env, "run", "--once", "--config", cfg)
	if r.Code != 0 {
		t.Fatalf("second run --once: exit %d, want 0\n%s", r.Code, r.Stderr)
	}
	samePagila(t, src, dst, "film_actor", "film", "payment")

	// status, which reads no catalog, takes each table's stored cursor
	// (with its appended primary key) as the file's.
	r = bin.Run(t, []string{"SYNCD_STATE=" + filepath.Join(dir, "state.db")}, "status", "--config", cfg)
	if r.Code != 0 || !strings.Contains(r.Stdout, "pagila.film_actor ") || strings.Contains(r.Stderr, "other settings") {
		t.Fatalf("status: exit %d, want 0\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}

// A tables: entry gives some tables their own settings in the one file:
// a cursor for a table that lacks last_update (which is skipped until
// then, saying how to fix it), a key, columns, a where, an exclusion. An
// entry naming no table is a warning with its file and line.
func TestPatternTablesOverrides(t *testing.T) {
	src, dst := pagila(t)
	src.Exec(t, `CREATE TABLE film_text (film_id int PRIMARY KEY, title text NOT NULL, changed_at timestamptz NOT NULL)`)
	src.Exec(t, `INSERT INTO film_text SELECT film_id, title, '2022-02-15 09:46:00+00' FROM film`)
	dir := t.TempDir()
	env := []string{"SYNCD_TEST_SRC=" + src.URL, "SYNCD_TEST_DST=" + dst.URL, "SYNCD_STATE=" + filepath.Join(dir, "state.db")}

	// Without an entry, film_text is skipped, and the reason says what to do.
	cfg := writeConfig(t, dir, "pagila.yaml", pagilaConfig)
	r := bin.Run(t, env, "validate", "--config", cfg)
	want := `pagila.film_text: skipped: source.cursor: column "last_update" does not exist in public.film_text (exclude it with source.exclude, or give it a cursor under tables:, such as tables: {film_text: {cursor: [...]}})`
	if r.Code != 1 || !strings.Contains(r.Stdout, want) {
		t.Fatalf("validate without an entry for film_text: exit %d, want 1 and %q\n%s%s", r.Code, want, r.Stdout, r.Stderr)
	}

	cfg = writeConfig(t, dir, "pagila.yaml", pagilaConfig+`tables:
  film_text: {cursor: [changed_at, film_id]}
  payment: {key: [payment_id, payment_date]}
  customer:
    columns: [customer_id, first_name, last_name, last_update]
  rental: {where: rental_id <= 100}
  staff: {exclude: true}
  flim: {cursor: [last_update, film_id]}
`)
	r = bin.Run(t, env, "validate", "--config", cfg)
	if r.Code != 0 {
		t.Fatalf("validate: exit %d, want 0\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	for _, want := range []string{
		"pagila: pattern public.* matches 15 tables to sync:",
		"pagila.film_text: cursor changed_at, film_id (set by tables.film_text.cursor)\n",
		"pagila.film: cursor last_update, film_id (primary key appended as the tie-breaker)\n",
		"pagila: warning: " + cfg + ":18: tables.flim: no table public.flim in the source database",
		"pagila.customer: ok (public.customer, 4 columns,",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Fatalf("validate's output lacks %q:\n%s", want, r.Stdout)
		}
	}
	if strings.Contains(r.Stdout, "pagila.staff") {
		t.Fatalf("validate lists the excluded table staff:\n%s", r.Stdout)
	}

	r = bin.Run(t, env, "run", "--once", "--config", cfg)
	if r.Code != 0 || !strings.Contains(r.Stderr, "syncd run: pagila: warning: "+cfg+":18: tables.flim: no table public.flim") {
		t.Fatalf("run --once: exit %d, want 0 with the warning about flim\n%s", r.Code, r.Stderr)
	}
	samePagila(t, src, dst, "film", "film_actor", "payment")
	if n := (testutil.Compare{Key: []string{"film_id"}}).RequireEqual(t, src.Pool, "public.film_text", dst.Pool, "pagila_copy.film_text"); n != 500 {
		t.Fatalf("film_text: %d rows compared, want 500", n)
	}
	if n := (testutil.Compare{Key: []string{"customer_id"}, Columns: []string{"customer_id", "first_name", "last_name", "last_update"}}).RequireEqual(t, src.Pool, "public.customer", dst.Pool, "pagila_copy.customer"); n != 599 {
		t.Fatalf("customer: %d rows compared, want 599", n)
	}
	if n := count(t, dst, "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'pagila_copy' AND table_name = 'customer'"); n != 4 {
		t.Fatalf("the copy of customer has %d columns, want the 4 of tables.customer.columns", n)
	}
	if n, max := count(t, dst, "SELECT count(*) FROM pagila_copy.rental"), count(t, dst, "SELECT max(rental_id) FROM pagila_copy.rental"); n != 100 || max != 100 {
		t.Fatalf("the copy of rental has %d rows up to %d, want the 100 of tables.rental.where", n, max)
	}
	if tableIn(t, dst, "pagila_copy", "staff") {
		t.Fatal("staff was copied, though its entry excludes it")
	}
	var pk string
	if err := dst.Pool.QueryRow(t.Context(), `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'pagila_copy.payment'::regclass AND contype = 'p'`).Scan(&pk); err != nil {
		t.Fatal(err)
	}
	if pk != "PRIMARY KEY (payment_id, payment_date)" {
		t.Fatalf("the copy of payment has %s, want tables.payment.key's order", pk)
	}

	// status applies the tables entries without the catalog.
	r = bin.Run(t, []string{"SYNCD_STATE=" + filepath.Join(dir, "state.db")}, "status", "--config", cfg)
	if r.Code != 0 || !strings.Contains(r.Stdout, "pagila.film_text ") || !strings.Contains(r.Stdout, "pagila.rental ") {
		t.Fatalf("status: exit %d, want 0\n%s%s", r.Code, r.Stdout, r.Stderr)
	}

	// A key the entry does not know is refused, naming its line.
	bad := writeConfig(t, dir, "bad.yaml", pagilaConfig+"tables:\n  film: {cursr: [film_id]}\n")
	if r := bin.Run(t, env, "validate", "--config", bad); r.Code != 2 || !strings.Contains(r.Stderr, "bad.yaml:12: tables.film.cursr: unknown key") {
		t.Fatalf("an unknown key in a tables entry: exit %d, want 2 naming bad.yaml:12\n%s", r.Code, r.Stderr)
	}
}

func tableIn(t *testing.T, db *pgtest.DB, schema, name string) bool {
	return count(t, db, fmt.Sprintf("SELECT count(*) FROM pg_tables WHERE schemaname = '%s' AND tablename = '%s'", schema, name)) == 1
}

// A plain source's copy in a schema the sink lacks: validate says the
// first run creates it (without creating anything), and the run creates
// the schema and the copy.
func TestCopySchemaCreated(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", strings.Replace(orders(t, src, dst, ""), "table: public.orders_copy", "table: fresh.orders_copy", 1))
	state := filepath.Join(dir, "state.db")
	r := bin.Run(t, nil, "validate", "--config", cfg, "--state", state)
	if r.Code != 0 || !strings.Contains(r.Stdout, "sink table fresh.orders_copy does not exist yet; the first run creates it") {
		t.Fatalf("validate: exit %d, want 0\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if n := count(t, dst, "SELECT count(*) FROM pg_namespace WHERE nspname = 'fresh'"); n != 0 {
		t.Fatal("validate created the schema")
	}
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("run --once: exit %d, want 0\n%s", r.Code, r.Stderr)
	}
	if n := testutil.RequireEqual(t, src.Pool, "public.orders", dst.Pool, "fresh.orders_copy"); n == 0 {
		t.Fatal("nothing was compared")
	}
}
