package filesink_test

import (
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/syncd/syncd/cli"
	"github.com/syncd/syncd/config/configdoc"
	"github.com/syncd/syncd/internal/filesink"
)

// The kind's key is in the generated key reference and JSON Schema of a
// build that registers it, and the schema takes a files sink without a DSN.
func TestDocsDescribeTheKindsKeys(t *testing.T) {
	sinks := cli.DefaultKinds().With(filesink.Kind()).Sinks()
	ref := configdoc.ReferenceWith(sinks)
	if !strings.Contains(ref, "\n### `sink.directory`\n") || !strings.Contains(ref, "`files` only: The directory the copy is written to") {
		t.Fatalf("the key reference has no section for sink.directory:\n%s", ref)
	}
	var doc any
	if err := yaml.Unmarshal(configdoc.SchemaWith(sinks), &doc); err != nil {
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
	file := func(sink string) any {
		var v any
		if err := yaml.Unmarshal([]byte("name: orders\nsource:\n  dsn: postgres://db/shop\n  table: public.orders\n  cursor: [updated_at, id]\nsink:\n"+sink), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if err := s.Validate(file("  type: files\n  directory: /var/lib/copies\n  table: public.orders\n")); err != nil {
		t.Errorf("the schema refuses a files sink: %v", err)
	}
	for name, sink := range map[string]string{
		"a DSN":                "  type: files\n  directory: /d\n  table: public.orders\n  dsn: postgres://db/x\n",
		"an unknown key":       "  type: files\n  directory: /d\n  table: public.orders\n  colour: red\n",
		"postgres without DSN": "  type: postgres\n  table: public.orders\n",
	} {
		if err := s.Validate(file(sink)); err == nil {
			t.Errorf("the schema takes a sink with %s", name)
		}
	}
}
