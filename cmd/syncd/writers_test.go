package main_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// twoSources is two sources of other names and other source tables that
// both write public.orders_copy.
func twoSources(t *testing.T) (src, dst *pgtest.DB, first, second string) {
	src, dst = setupOrders(t)
	src.Exec(t, `CREATE TABLE orders2 (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, name text)`)
	src.Exec(t, `INSERT INTO orders2 SELECT id + 5000, updated_at, 'other' FROM orders`)
	first = orders(t, src, dst, "")
	second = strings.Replace(strings.Replace(first, "name: orders", "name: others", 1), "table: public.orders\n", "table: public.orders2\n", 1)
	return src, dst, first, second
}

// A copy has exactly one writer. Two sources in one file that write the
// same sink table: validate and run exit 2 naming both, and nothing is
// written.
func TestTwoWritersInOneFileRefused(t *testing.T) {
	_, dst, first, second := twoSources(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "both.yaml", first+"---\n"+second)
	env := []string{"SYNCD_STATE=" + filepath.Join(dir, "state.db")}
	for _, cmd := range [][]string{{"validate"}, {"run", "--once"}} {
		r := bin.Run(t, env, append(cmd, "--config", cfg)...)
		if r.Code != 2 {
			t.Fatalf("%v with two writers of one copy: exit %d, want 2\n%s%s", cmd, r.Code, r.Stdout, r.Stderr)
		}
		for _, want := range []string{"both.yaml:", "sink.table", "the copy public.orders_copy is written by source orders", "source others", "exactly one writer"} {
			if !strings.Contains(r.Stderr, want) {
				t.Fatalf("%v: stderr lacks %q:\n%s", cmd, want, r.Stderr)
			}
		}
	}
	if tableExists(t, dst, "orders_copy") {
		t.Fatal("the copy was created although the config was refused")
	}
}

// The same from two files, run one after the other (another host would
// do the same): the sink's catalog names the copy's writer, and the second
// source is refused by validate and run (exit 2); the copy keeps the first
// source's rows only.
func TestTwoWritersInTwoFilesRefused(t *testing.T) {
	src, dst, first, second := twoSources(t)
	dir := t.TempDir()
	a := writeConfig(t, dir, "a.yaml", first)
	b := writeConfig(t, dir, "b.yaml", second)
	if r := bin.Run(t, []string{"SYNCD_STATE=" + filepath.Join(dir, "a.db")}, "run", "--once", "--config", a); r.Code != 0 {
		t.Fatalf("first source: exit %d\n%s", r.Code, r.Stderr)
	}
	env := []string{"SYNCD_STATE=" + filepath.Join(dir, "b.db")}
	for _, cmd := range [][]string{{"validate"}, {"run", "--once"}} {
		r := bin.Run(t, env, append(cmd, "--config", b)...)
		if r.Code != 2 {
			t.Fatalf("%v of a second writer: exit %d, want 2\n%s%s", cmd, r.Code, r.Stdout, r.Stderr)
		}
		for _, want := range []string{"b.yaml:", "the copy public.orders_copy is written by source orders", "source others", "DELETE FROM syncd.copies WHERE copy_table = E'public.orders_copy'"} {
			if !strings.Contains(r.Stderr, want) {
				t.Fatalf("%v: stderr lacks %q:\n%s", cmd, want, r.Stderr)
			}
		}
	}
	sameTable(t, src, dst, "orders", "id")
	// validate of the writer shows the sink's record beside the state file's.
	r := bin.Run(t, []string{"SYNCD_STATE=" + filepath.Join(dir, "a.db")}, "validate", "--config", a)
	if r.Code != 0 || !strings.Contains(r.Stdout, "orders: sink record: public.orders_copy at (") || !strings.Contains(r.Stdout, "state file: the same") {
		t.Fatalf("validate of the writer: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	// status --sink shows it too, and plain status reads no database.
	r = bin.Run(t, []string{"SYNCD_STATE=" + filepath.Join(dir, "a.db")}, "status", "--sink", "--config", a)
	if r.Code != 0 || !strings.Contains(r.Stdout, "orders: sink record: public.orders_copy at (") || !strings.Contains(r.Stdout, "20 pages, 1000 rows") {
		t.Fatalf("status --sink: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	// Once the copy is released on the sink, the other source may take it.
	dst.Exec(t, "DELETE FROM syncd.copies WHERE copy_table = 'public.orders_copy'")
	if r := bin.Run(t, env, "validate", "--config", b); r.Code != 0 {
		t.Fatalf("validate after the release: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}

// Two pattern sources (s1.* and s2.*) mapped to public.*_copy: s1.x and
// s2.x both write public.x_copy. validate and run exit 2 naming both.
func TestTwoPatternsOneCopyRefused(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	for _, s := range []string{"s1", "s2"} {
		src.Exec(t, fmt.Sprintf(`CREATE SCHEMA %[1]s; CREATE TABLE %[1]s.x (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL);
INSERT INTO %[1]s.x SELECT g, now() - interval '1 hour' FROM generate_series(1, 10) g`, s))
	}
	pattern := `name: %[1]s
source:
  dsn: %[2]s
  table: %[1]s.*
  cursor: [updated_at, id]
sink:
  dsn: %[3]s
  table: public.*_copy
`
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "p.yaml", fmt.Sprintf(pattern, "s1", src.URL, dst.URL)+"---\n"+fmt.Sprintf(pattern, "s2", src.URL, dst.URL))
	env := []string{"SYNCD_STATE=" + filepath.Join(dir, "state.db")}
	for _, cmd := range [][]string{{"validate"}, {"run", "--once"}} {
		r := bin.Run(t, env, append(cmd, "--config", cfg)...)
		if r.Code != 2 || !strings.Contains(r.Stderr, "the copy public.x_copy is written by source s1.x") || !strings.Contains(r.Stderr, "source s2.x") {
			t.Fatalf("%v: exit %d, want 2 naming s1.x, s2.x and public.x_copy\n%s%s", cmd, r.Code, r.Stdout, r.Stderr)
		}
	}
	if tableExists(t, dst, "x_copy") {
		t.Fatal("the copy was created although the config was refused")
	}
}
