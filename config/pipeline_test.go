package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ${VAR} references are looked up through Options.Getenv, never the
// process environment directly; an unset one names the variable and key.
func TestGetenvInjected(t *testing.T) {
	y := strings.Replace(valid, "dsn: postgres://u@127.0.0.1/src", "dsn: ${SRC_DSN_FOR_TEST}", 1)
	t.Setenv("SRC_DSN_FOR_TEST", "postgres://from-process/src")
	lookups := map[string]int{}
	getenv := func(k string) (string, bool) {
		lookups[k]++
		if k == "SRC_DSN_FOR_TEST" {
			return "postgres://injected/src", true
		}
		return "", false
	}
	cs, err := ParseAll("e.yaml", []byte(y), Options{Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	if got := cs[0].Source.DSN; got != "postgres://injected/src" || lookups["SRC_DSN_FOR_TEST"] != 1 {
		t.Fatalf("source.dsn = %q after %v lookups; want the injected value, looked up once", got, lookups)
	}
	_, err = ParseAll("e.yaml", []byte(y), Options{Getenv: func(string) (string, bool) { return "", false }})
	if err == nil || !strings.Contains(err.Error(), "e.yaml:4: source.dsn: environment variable SRC_DSN_FOR_TEST is not set") {
		t.Fatalf("unset variable: %v", err)
	}
}

// source.table and sink.table are parsed once, by the loader, and the
// members of a pattern source carry their own parsed names.
func TestTablesParsedOnce(t *testing.T) {
	c, err := Parse("t.yaml", []byte(strings.Replace(valid, "table: public.customers\n", "table: '\"sales.eu\".customers'\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.Ident != (Table{Schema: "sales.eu", Name: "customers"}) || c.Sink.Ident.String() != c.Sink.Table {
		t.Fatalf("source %+v, sink %+v (%q)", c.Source.Ident, c.Sink.Ident, c.Sink.Table)
	}
	p, err := Parse("p.yaml", []byte("name: shop\nsource:\n  dsn: x\n  table: app.*\n  exclude: [tmp_*]\n  cursor: [updated_at, id]\nsink:\n  dsn: y\n  table: copy.*_c\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := p.Named(Table{Schema: "app", Name: "orders"})
	if m.Source.Ident != (Table{"app", "orders"}) || m.Sink.Ident != (Table{"copy", "orders_c"}) || m.Sink.Table != "copy.orders_c" || m.IsPattern() {
		t.Fatalf("member: source %+v sink %+v %q", m.Source.Ident, m.Sink.Ident, m.Sink.Table)
	}
	if !p.Match(Table{"app", "orders"}) || p.Match(Table{"app", "tmp_x"}) || p.Match(Table{"other", "orders"}) {
		t.Fatal("pattern matching by the parsed names")
	}
}

// LoadEach gives each file its outcome: a bad file and a file reusing a
// taken name fail alone, and keep stands in for them (first come, first
// served on names).
func TestLoadEach(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", valid)
	write("b.yaml", "name: [")
	write("c.yaml", valid) // the name a.yaml took
	write("d.yaml", strings.Replace(valid, "name: customers", "name: other", 1))
	write("notes.txt", "ignored")
	kept := &Config{Name: "old-b"}
	stale := &Config{Name: "customers"}
	loads, err := LoadEach(dir, Options{}, func(f string) []*Config {
		switch filepath.Base(f) {
		case "b.yaml":
			return []*Config{kept}
		case "c.yaml":
			return []*Config{stale} // its name is a.yaml's now: left out
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range loads {
		var names []string
		for _, c := range l.Configs {
			names = append(names, c.Name)
		}
		got = append(got, filepath.Base(l.File)+":"+strings.Join(names, ",")+":"+map[bool]string{true: "failed", false: "ok"}[l.Err != nil])
	}
	if want := "a.yaml:customers:ok b.yaml:old-b:failed c.yaml::failed d.yaml:other:ok"; strings.Join(got, " ") != want {
		t.Fatalf("loads %q, want %q", strings.Join(got, " "), want)
	}
	if err := loads[2].Err; !strings.Contains(err.Error(), `source name "customers" is already used by `+filepath.Join(dir, "a.yaml")) {
		t.Fatalf("c.yaml: %v", err)
	}
}
