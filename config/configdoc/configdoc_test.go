package configdoc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/docgen"
)

// Every key the decoder accepts has a description here and a section in
// docs/CONFIG.md, and nothing is described that the decoder refuses.
func TestEveryKeyDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/CONFIG.md")
	if err != nil {
		t.Fatal(err)
	}
	walked := map[string]bool{}
	for _, k := range flatten(Keys()) {
		walked[k.Path] = true
		if d, ok := docs[k.Path]; !ok || d.Text == "" {
			t.Errorf("config key %s has no description: describe it in config/configdoc/keys.go, then run make docs", k.Path)
		}
		if !bytes.Contains(doc, []byte("\n### `"+k.Path+"`\n")) {
			t.Errorf("docs/CONFIG.md has no section for config key %s: run make docs", k.Path)
		}
	}
	for path := range docs {
		if !walked[path] {
			t.Errorf("config/configdoc/keys.go describes %s, which the loader does not accept: remove it", path)
		}
	}
	if len(walked) < 30 {
		t.Fatalf("walked only %d keys: %v", len(walked), walked)
	}
}

// docs/CONFIG.md's key reference and docs/syncd.schema.json are what make
// docs generates.
func TestConfigDocsUpToDate(t *testing.T) {
	doc, err := os.ReadFile("../../docs/CONFIG.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := docgen.Splice(doc, []byte(Reference()))
	if err != nil {
		t.Fatalf("docs/CONFIG.md: %v", err)
	}
	if !bytes.Equal(doc, want) {
		t.Errorf("docs/CONFIG.md differs from the config keys the code accepts: run make docs and commit it")
	}
	schema, err := os.ReadFile("../../docs/syncd.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(schema, Schema()) {
		t.Errorf("docs/syncd.schema.json differs from the config keys the code accepts: run make docs and commit it")
	}
}

// Each documented default is the value the loader fills in.
func TestDefaultsAsDocumented(t *testing.T) {
	c, err := config.Parse("min.yaml", []byte(`name: min
source:
  dsn: postgres://a@b/c
  table: public.t
  cursor: [updated_at, id]
sink:
  dsn: postgres://a@b/d
  table: public.t_copy
reconcile:
  schedule: "0 3 * * *"
`))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range flatten(Keys()) {
		d := docs[k.Path]
		if d.Default == "" {
			continue
		}
		v := reflect.ValueOf(*c)
		for _, part := range strings.Split(k.Path, ".") {
			v = field(t, v, part)
		}
		if got := format(v); got != d.Default {
			t.Errorf("%s: the loader fills in %q, config/configdoc/keys.go says %q", k.Path, got, d.Default)
		}
		n++
	}
	if n < 10 {
		t.Fatalf("checked only %d defaults", n)
	}
}

// field returns the field of struct v (through a pointer) with yaml tag name.
func field(t *testing.T, v reflect.Value, name string) reflect.Value {
	t.Helper()
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	for i := range v.NumField() {
		if v.Type().Field(i).Tag.Get("yaml") == name {
			return v.Field(i)
		}
	}
	t.Fatalf("no field %q in %s", name, v.Type())
	return reflect.Value{}
}

func format(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case config.Duration:
		return dur(x.Duration)
	case config.Size:
		return x.String()
	}
	return fmt.Sprint(v.Interface())
}

// compile compiles docs/syncd.schema.json, which also checks it against the
// draft-07 meta-schema.
func compile(t *testing.T) *jsonschema.Schema {
	t.Helper()
	var doc any
	if err := yaml.Unmarshal(Schema(), &doc); err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("syncd.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("syncd.schema.json")
	if err != nil {
		t.Fatalf("the schema does not compile: %v", err)
	}
	return s
}

// documents decodes every YAML document of data as JSON-like values.
func documents(t *testing.T, data []byte) []any {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []any
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if v != nil {
			out = append(out, v)
		}
	}
}

// Every example in configs/ validates against the schema, names it in its
// first line, and loads.
func TestExamplesMatchSchema(t *testing.T) {
	s := compile(t)
	files, err := filepath.Glob("../../configs/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(data, []byte("# yaml-language-server: $schema=../docs/syncd.schema.json\n")) {
			t.Errorf("%s: the first line is not # yaml-language-server: $schema=../docs/syncd.schema.json", f)
		}
		for i, doc := range documents(t, data) {
			if err := s.Validate(doc); err != nil {
				t.Errorf("%s, document %d: %v", f, i+1, err)
			}
		}
	}
}

// The schema refuses what the loader refuses, as an editor would show it.
func TestSchemaRefuses(t *testing.T) {
	s := compile(t)
	const good = `name: orders
schedule: "@every 30s"
source:
  dsn: ${SOURCE_DSN}
  table: public.orders
  cursor: [updated_at, id]
  lookback: 5s
  page_bytes: 16MB
  first_load: {workers: 0, chunk_size: 8192}
sink:
  dsn: ${SINK_DSN}
  table: public.orders_copy
  lock_timeout: 0
  page_timeout: 0
`
	expand := func(file string) []byte {
		return []byte(os.Expand(file, func(string) string { return "postgres://a@b/c" }))
	}
	if _, err := config.Parse("good.yaml", expand(good)); err != nil {
		t.Fatalf("the loader refuses the good file: %v", err)
	}
	for _, d := range documents(t, []byte(good)) {
		if err := s.Validate(d); err != nil {
			t.Fatalf("the schema refuses the good file: %v", err)
		}
	}
	for _, bad := range []struct{ old, new string }{
		{"name: orders", "name: orders\nnmae: x"},
		{"lookback: 5s", "lookback: 5"},
		{"lookback: 5s", "lookback: soon"},
		{"page_bytes: 16MB", "page_bytes: 16 megs"},
		{"page_bytes: 16MB", "page_size: lots"},
		{"page_bytes: 16MB", "bound: some"},
		{"page_bytes: 16MB", "page_size: 0"},
		{"cursor: [updated_at, id]", "cursor: []"},
		{"  table: public.orders\n", ""},
		{"  dsn: ${SINK_DSN}", "  dsn: x\n  dsn_file: y"},
		{"  dsn: ${SINK_DSN}", "  type: coupon_grants\n  dsn: x"},
		{"name: orders", "name: two words"},
		{"name: orders", "name: orders\nreconcile: {repair: true}"},
	} {
		file := strings.Replace(good, bad.old, bad.new, 1)
		if file == good {
			t.Fatalf("%q not in the good file", bad.old)
		}
		if _, err := config.Parse("bad.yaml", expand(file)); err == nil {
			t.Errorf("the loader takes %q; this case is not a refusal", bad.new)
		}
		for _, d := range documents(t, []byte(file)) {
			if err := s.Validate(d); err == nil {
				t.Errorf("the schema takes %q", bad.new)
			}
		}
	}
}

// Every whole source file shown in the README and the docs (a ```yaml
// block with a top-level name:) loads and validates against the schema, so
// that a reader can paste it.
func TestDocExamplesLoad(t *testing.T) {
	s := compile(t)
	n := 0
	for _, f := range []string{"../../README.md", "../../docs/CONFIG.md", "../../docs/PATTERNS.md", "../../docs/COUPONS.md"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range strings.Split(string(data), "```yaml\n")[1:] {
			body, _, ok := strings.Cut(b, "```")
			if !ok {
				t.Fatalf("%s: yaml block %d is not closed", f, i+1)
			}
			whole := (strings.HasPrefix(body, "name:") || strings.Contains(body, "\nname:")) && strings.Contains(body, "\nsink:")
			if !whole {
				continue // a fragment, such as a key's example
			}
			n++
			file := os.Expand(body, func(string) string { return "postgres://a@b/c" })
			if _, err := config.Parse(fmt.Sprintf("%s yaml block %d", f, i+1), []byte(file)); err != nil {
				t.Error(err)
			}
			for _, d := range documents(t, []byte(body)) {
				if err := s.Validate(d); err != nil {
					t.Errorf("%s yaml block %d: %v", f, i+1, err)
				}
			}
		}
	}
	if n < 3 {
		t.Fatalf("found only %d source files in the docs", n)
	}
}
