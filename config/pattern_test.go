package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const patternYAML = `name: shop
source:
  dsn: postgres://u@127.0.0.1/src
  table: sales.order_*
  exclude: ["*_old", other.order_x, order_tmp]
  cursor: [updated_at, id]
sink:
  dsn: postgres://u@127.0.0.1/dst
  table: copy.*_copy
`

func TestPatternSource(t *testing.T) {
	c, err := Parse("shop.yaml", []byte(patternYAML))
	if err != nil {
		t.Fatal(err)
	}
	if !c.IsPattern() || len(c.Sink.Key) != 0 {
		t.Fatalf("pattern source: IsPattern %v, key %v (want the primary key later, not a default)", c.IsPattern(), c.Sink.Key)
	}
	for table, want := range map[string]bool{
		"sales.order_lines": true, "sales.order_": true, "sales.order_2026_old": false, "sales.order_tmp": false,
		"sales.orders": false, "public.order_lines": false, "sales.order_x": true,
	} {
		tb, _ := ParseTable(table)
		if got := c.Match(tb); got != want {
			t.Errorf("Match(%s) = %v, want %v", table, got, want)
		}
	}
	m, err := c.ForTable(Table{Schema: "sales", Name: "order_lines"}, []string{"order_id", "line"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "shop.order_lines" || m.Source.Table != "sales.order_lines" || m.Sink.Table != "copy.order_lines_copy" ||
		strings.Join(m.Sink.Key, ",") != "order_id,line" || m.Pattern != "shop" || c.Sink.Key != nil {
		t.Fatalf("ForTable: %+v", m)
	}
	if _, err := c.ForTable(Table{Schema: "sales", Name: "order_heap"}, nil); err == nil || !strings.Contains(err.Error(), "no primary key") {
		t.Fatalf("ForTable without a key: %v", err)
	}
	if _, err := c.ForTable(Table{Schema: "sales", Name: "order lines"}, []string{"id"}); err == nil {
		t.Fatal("ForTable accepted a table whose source name is not a valid name")
	}
}

func TestPatternErrorsNameFileLineKey(t *testing.T) {
	for _, tc := range []struct{ name, from, to, want string }{
		{"star in sink without pattern", "table: sales.order_*\n  exclude: [\"*_old\", other.order_x, order_tmp]\n", "table: sales.orders\n", "shop.yaml:8: sink.table: \"copy.*_copy\" has a * but source.table"},
		{"exclude without pattern", "table: sales.order_*\n", "table: sales.orders\n", "shop.yaml:5: source.exclude: only a pattern source.table"},
		{"pattern sink without star", "table: copy.*_copy", "table: copy.orders", "shop.yaml:9: sink.table: \"copy.orders\": a pattern source.table writes each table to its own copy"},
		{"two stars", "table: copy.*_copy", "table: copy.*_*", "shop.yaml:9: sink.table"},
		{"schema pattern", "table: sales.order_*", "table: s*.order_*", "shop.yaml:4: source.table"},
		{"exclude schema pattern", "other.order_x", "o*.order_x", "shop.yaml:5: source.exclude[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := strings.Replace(patternYAML, tc.from, tc.to, 1)
			_, err := Parse("shop.yaml", []byte(body))
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant %q", err, tc.want)
			}
		})
	}
}

// Several YAML documents are several sources, with the file's own line
// numbers in errors; Parse, which returns one source, refuses them.
func TestSeveralDocuments(t *testing.T) {
	two := valid + "---\n" + strings.Replace(valid, "name: customers", "name: customers2", 1)
	cs, err := ParseAll("two.yaml", []byte(two), Options{})
	if err != nil || len(cs) != 2 || cs[0].Name != "customers" || cs[1].Name != "customers2" {
		t.Fatalf("ParseAll: %v %v", cs, err)
	}
	if cs[1].Lines["source.cursor"] != 22 {
		t.Fatalf("line of the second document's source.cursor: %d, want 22", cs[1].Lines["source.cursor"])
	}
	if _, err := Parse("two.yaml", []byte(two)); err == nil || !strings.Contains(err.Error(), "two.yaml:17: name: this file holds 2 sources") {
		t.Fatalf("Parse of two documents: %v", err)
	}
	bad := valid + "---\n" + strings.Replace(valid, "page_size: 500", "page_size: many", 1)
	if _, err := ParseAll("bad.yaml", []byte(bad), Options{}); err == nil || !strings.Contains(err.Error(), "bad.yaml:26: source.page_size") {
		t.Fatalf("error in the second document: %v", err)
	}
	dup := valid + "---\n" + valid
	if _, err := ParseAll("dup.yaml", []byte(dup), Options{}); err == nil || !strings.Contains(err.Error(), "dup.yaml:17: name: source name \"customers\" is already used by the document at line 1") {
		t.Fatalf("duplicate names: %v", err)
	}
	if cs, err := ParseAll("trail.yaml", []byte(valid+"---\n"), Options{}); err != nil || len(cs) != 1 {
		t.Fatalf("a trailing ---: %v %v", cs, err)
	}
}

// Options.NoSecrets loads a config whose DSN variables are not set.
func TestNoSecrets(t *testing.T) {
	body := strings.Replace(valid, "postgres://u@127.0.0.1/src", "${SYNCD_TEST_NEVER_SET}", 1)
	if _, err := ParseAll("c.yaml", []byte(body), Options{}); err == nil || !strings.Contains(err.Error(), "SYNCD_TEST_NEVER_SET is not set") {
		t.Fatalf("without NoSecrets: %v", err)
	}
	cs, err := ParseAll("c.yaml", []byte(body), Options{NoSecrets: true})
	if err != nil || cs[0].Name != "customers" {
		t.Fatalf("with NoSecrets: %v", err)
	}
	other := strings.Replace(valid, "tenant_id = 7", "${SYNCD_TEST_NEVER_SET}", 1)
	if _, err := ParseAll("c.yaml", []byte(other), Options{NoSecrets: true}); err == nil {
		t.Fatal("NoSecrets skipped the expansion of a key other than a DSN")
	}
}

// A source may not take the name a pattern source gives one of its tables.
func TestPatternMemberNameTaken(t *testing.T) {
	dir := t.TempDir()
	clash := strings.Replace(valid, "name: customers", "name: shop.orders", 1)
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(patternYAML+"---\n"+clash), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir)
	if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `a.yaml:11: name: "shop.orders" is in the names of pattern source shop`) {
		t.Fatalf("got %v", err)
	}
}

const tablesYAML = patternYAML + `tables:
  order_lines:
    cursor: [changed_at, line_id]
    key: [line_id]
    columns: [line_id, changed_at, qty]
    where: qty > 0
    schedule: "@every 5m"
  order_notes: {exclude: true}
`

// A tables entry replaces the pattern's settings for its table only, and
// the errors of a key it sets name the entry's line.
func TestPatternTablesOverride(t *testing.T) {
	c, err := Parse("shop.yaml", []byte(tablesYAML))
	if err != nil {
		t.Fatal(err)
	}
	if c.Match(Table{Schema: "sales", Name: "order_notes"}) {
		t.Fatal("a table with exclude: true is matched")
	}
	m, err := c.ForTable(Table{Schema: "sales", Name: "order_lines"}, []string{"order_id", "line"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(m.Source.Cursor, ",") != "changed_at,line_id" || strings.Join(m.Sink.Key, ",") != "line_id" ||
		strings.Join(m.Source.Columns, ",") != "line_id,changed_at,qty" || m.Source.Where != "qty > 0" || m.Schedule != "@every 5m" ||
		m.CursorNote != "set by tables.order_lines.cursor" || m.Tables != nil {
		t.Fatalf("ForTable with a tables entry: %+v", m)
	}
	if got := m.Errorf("source.cursor", "x").Error(); !strings.HasPrefix(got, "shop.yaml:12: source.cursor") {
		t.Fatalf("an error of the overridden cursor: %q, want the entry's line 12", got)
	}
	if got := c.Errorf("source.cursor", "x").Error(); !strings.HasPrefix(got, "shop.yaml:6: source.cursor") {
		t.Fatalf("the pattern's own line moved: %q", got)
	}
	o, err := c.ForTable(Table{Schema: "sales", Name: "order_x"}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.Source.Cursor, ",") != "updated_at,id" || o.Schedule != DefaultSchedule || o.CursorNote != "" || o.Source.Where != "" {
		t.Fatalf("a table without an entry: %+v", o)
	}
	w := c.Unmatched([]string{"order_lines"})
	if len(w) != 1 || !strings.HasPrefix(w[0], "shop.yaml:17: tables.order_notes: no table sales.order_notes") {
		t.Fatalf("Unmatched: %q", w)
	}
}

func TestPatternTablesErrors(t *testing.T) {
	for _, tc := range []struct{ name, from, to, want string }{
		{"unknown key", "where: qty > 0", "wher: qty > 0", "shop.yaml:15: tables.order_lines.wher: unknown key; the keys here are: cursor, key, columns, where, deleted_column, schedule, exclude"},
		{"not matched", "order_notes: {exclude: true}", "invoices: {exclude: true}", "shop.yaml:17: tables.invoices: table sales.invoices is not matched by source.table sales.order_*"},
		{"excluded", "order_notes: {exclude: true}", "order_tmp: {exclude: true}", "shop.yaml:17: tables.order_tmp: table sales.order_tmp is excluded by source.exclude"},
		{"twice", "order_notes: {exclude: true}", "order_lines: {exclude: true}", "shop.yaml:17: tables.order_lines: \"order_lines\" given twice"},
		{"schedule", `"@every 5m"`, `"sometimes"`, "shop.yaml:16: tables.order_lines.schedule: \"sometimes\" is not a cron schedule"},
		{"cursor not in columns", "columns: [line_id, changed_at, qty]", "columns: [line_id, qty]", "shop.yaml:14: tables.order_lines.columns: cursor column \"changed_at\" must be listed in the columns of table order_lines"},
		{"exclude with settings", "order_notes: {exclude: true}", "order_notes: {exclude: true, where: x}", "shop.yaml:17: tables.order_notes.exclude: the table is excluded, so its where is never used"},
		{"not a pattern", "table: sales.order_*\n  exclude: [\"*_old\", other.order_x, order_tmp]\n", "table: sales.orders\n", ""},
		{"not a mapping", "tables:\n", "tables: [a]\nx:\n", "shop.yaml:10: tables: want a mapping of names, got a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := strings.Replace(tablesYAML, tc.from, tc.to, 1)
			if file == tablesYAML {
				t.Fatalf("%q not in the file", tc.from)
			}
			if tc.name == "not a pattern" {
				file = strings.Replace(file, "copy.*_copy", "copy.orders", 1)
				tc.want = "shop.yaml:9: tables: only a pattern source.table"
			}
			_, err := Parse("shop.yaml", []byte(file))
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
