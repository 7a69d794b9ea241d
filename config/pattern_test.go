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
