package config

import (
	"strings"
	"testing"
)

// A badly indented line is reported at its own line with "check the
// indentation", not where yaml.v3 noticed it (often the line that opened
// the mapping), and a correct file is left alone.
func TestIndentationErrorsPointAtTheLine(t *testing.T) {
	const head = "name: orders\nsource:\n  dsn: x\n"
	for _, tc := range []struct {
		name, body, want string
	}{
		{"key one space too many after a value", head + "  table: public.orders\n   cursor: [updated_at, id]\n  page_size: 50\n",
			"o.yaml:5: check the indentation: this line is indented more than the line above it, which has its value already (yaml: mapping values are not allowed in this context)"},
		{"key one space too many after a list", head + "  cursor: [updated_at, id]\n   page_size: 50\nsink:\n  dsn: y\n",
			"o.yaml:5: check the indentation: this line is indented more than the line above it, which has its value already (yaml: did not find expected key)"},
		{"key one space too few", head + "  table: public.orders\n cursor: [updated_at, id]\n  page_size: 50\n",
			"o.yaml:5: check the indentation: this line is indented differently from the keys above it (yaml: did not find expected key)"},
		{"top-level key one space in", head + "  table: public.orders\n sink:\n  dsn: y\n",
			"o.yaml:5: check the indentation: this line is indented differently from the keys above it (yaml: did not find expected key)"},
		{"a tab", head + "\ttable: public.orders\n  cursor: [updated_at, id]\n",
			"o.yaml:4: check the indentation: this line is indented with a tab; YAML indents with spaces only (yaml: found a tab character that violates indentation)"},
		{"list item one space too few", head + "  cursor:\n    - updated_at\n   - id\n  page_size: 5\n",
			"o.yaml:6: check the indentation: this line is indented differently from the keys above it (yaml: did not find expected key)"},
		{"list of mappings", head + "  table: t\nsink:\n  dsn: y\n  columns:\n    - name: a\n      type: text\n    - name: b\n       type: int\n",
			"o.yaml:11: check the indentation: this line is indented more than the line above it, which has its value already (yaml: mapping values are not allowed in this context)"},
		{"block scalar and flow list above", "name: orders\nsource:\n  where: |\n    a = 1\n      and b = 2\n  cursor: [\n      updated_at,\n   id]\n  table: t\n   page_size: 5\n",
			"o.yaml:10: check the indentation: this line is indented more than the line above it, which has its value already (yaml: mapping values are not allowed in this context)"},
		{"quoted value", "name: orders\nsource:\n  dsn: \"x: y\"\n   table: t\n",
			"o.yaml:4: check the indentation: this line is indented more than the line above it, which has its value already (yaml: did not find expected key)"},
		{"an unquoted colon", "name: orders\nsource:\n  where: a: b\n", `o.yaml:3: malformed YAML: mapping values are not allowed in this context; a value with ": " in it needs quotes`},
		{"not an indentation error", "name: bad\nsource: [dsn: x\n  table: {\n", "o.yaml:1: malformed YAML: did not find expected ',' or ']'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAll("o.yaml", []byte(tc.body), Options{NoSecrets: true})
			if err == nil || err.Error() != tc.want {
				t.Errorf("%s\ngot  %v\nwant %s", tc.body, err, tc.want)
			}
		})
	}
	// Lines count from the top of the file in every document.
	if at, why := indentMistake([]byte(head+"---\nname: b\nsource:\n  dsn: x\n table: t\n"), 5); at != 8 || why != "this line is indented differently from the keys above it" {
		t.Errorf("second document: line %d: %s; want line 8", at, why)
	}
	// The same files indented right have no mistake to point at.
	for _, ok := range []string{
		head + "  table: public.orders\n  cursor: [updated_at, id]\nsink:\n  dsn: y\n",
		head + "  cursor:\n  - updated_at\n  - id\n  where: >\n    a = 1\n\n    b\n# comment\nsink:\n  dsn: y  # comment\n",
		"name: a\nsource:\n  columns:\n    - name: a\n      type: text\n    -\n      name: b\n  \"quoted key\": 1\n---\nname: b\n",
	} {
		if at, why := indentMistake([]byte(ok), 1); at != 0 {
			t.Errorf("%s\nline %d: %s; want no mistake", ok, at, why)
		}
		if strings.Contains(ok, "\t") {
			t.Fatal("tab")
		}
	}
}
