package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/syncd/syncd/config"
)

// repoRoot is the module root, one folder up from this package.
const repoRoot = ".."

// dummyDSN stands in for every secret while the example configs are loaded.
const dummyDSN = "postgres://syncd:not-a-secret@db.invalid:5432/app?sslmode=verify-full"

// readFile returns a repository file's contents.
func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return string(b)
}

// obj is one decoded YAML document.
type obj = map[string]any

// loadDocs decodes every YAML document of a manifest file, skipping empty ones.
func loadDocs(t *testing.T, rel string) []obj {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader([]byte(readFile(t, rel))))
	var out []obj
	for {
		var doc obj
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", rel, len(out)+1, err)
		}
		if doc != nil {
			out = append(out, doc)
		}
	}
}

// dig follows keys (string for a mapping, int for a list) and returns nil
// when any step is missing.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(obj)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// as digs a value of type T and fails the test when it is something else.
func as[T any](t *testing.T, what string, v any, path ...any) T {
	t.Helper()
	x, ok := dig(v, path...).(T)
	if !ok {
		t.Fatalf("%s: %v is %#v, want a %T", what, path, dig(v, path...), x)
	}
	return x
}

// str digs a string; num digs a whole number.
var (
	str = as[string]
	num = as[int]
)

// list digs a list (nil when absent).
func list(v any, path ...any) []any {
	l, _ := dig(v, path...).([]any)
	return l
}

// find returns the only document of kind and name among docs.
func find(t *testing.T, docs []obj, kind, name string) obj {
	t.Helper()
	var hit obj
	for _, d := range docs {
		if d["kind"] == kind && dig(d, "metadata", "name") == name {
			if hit != nil {
				t.Fatalf("%s %s is defined twice", kind, name)
			}
			hit = d
		}
	}
	if hit == nil {
		t.Fatalf("no %s named %s", kind, name)
	}
	return hit
}

// flags parses a syncd command line ("run --config X --once ...") into its
// command and a flag map; a flag without a value maps to "true".
func flags(t *testing.T, args []string) (string, map[string]string) {
	t.Helper()
	if len(args) == 0 {
		t.Fatal("empty syncd command line")
	}
	out := map[string]string{}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			t.Fatalf("%q: unexpected argument %q", strings.Join(args, " "), a)
		}
		name := strings.TrimPrefix(a, "--")
		if _, dup := out[name]; dup {
			t.Fatalf("%q: flag --%s given twice", strings.Join(args, " "), name)
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			out[name] = args[i+1]
			i++
		} else {
			out[name] = "true"
		}
	}
	return args[0], out
}

// shutdownTimeout is --shutdown-timeout, or the daemon's default of 30s.
func shutdownTimeout(t *testing.T, f map[string]string) time.Duration {
	t.Helper()
	s, ok := f["shutdown-timeout"]
	if !ok {
		return 30 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("--shutdown-timeout %q: %v", s, err)
	}
	return d
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// varRefs lists the ${VAR} names that files reference, sorted.
func varRefs(files map[string]string) []string {
	seen := map[string]bool{}
	for _, body := range files {
		for _, m := range varRef.FindAllStringSubmatch(body, -1) {
			seen[m[1]] = true
		}
	}
	var out []string
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// loadSources writes files (relative path -> contents) under a fresh folder
// and loads dir (relative to it) with the real loader, with exactly the given
// variables set to a dummy DSN. It returns the loaded source names.
func loadSources(t *testing.T, files map[string]string, dir string, vars []string) []string {
	t.Helper()
	root := t.TempDir()
	for rel, body := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range vars {
		t.Setenv(v, dummyDSN)
	}
	cfgs, err := config.Load(filepath.Join(root, dir))
	if err != nil {
		t.Fatalf("load %s: %v", dir, err)
	}
	var names []string
	for _, c := range cfgs {
		if c.Source.DSN != dummyDSN || c.Sink.DSN != dummyDSN {
			t.Errorf("%s: DSNs did not come from the environment: source %q, sink %q", c.File, c.Source.DSN, c.Sink.DSN)
		}
		names = append(names, c.Name)
	}
	return names
}

// env is one container environment variable and where its value comes from.
type env struct {
	Secret, Key string // secretKeyRef, when set
	Field       string // fieldRef.fieldPath, when set
	Value       string
}

func containerEnv(t *testing.T, c any) map[string]env {
	t.Helper()
	out := map[string]env{}
	for _, e := range list(c, "env") {
		name := str(t, "env", e, "name")
		if _, dup := out[name]; dup {
			t.Errorf("env %s is set twice", name)
		}
		var v env
		if dig(e, "valueFrom", "secretKeyRef") != nil {
			v.Secret = str(t, name, e, "valueFrom", "secretKeyRef", "name")
			v.Key = str(t, name, e, "valueFrom", "secretKeyRef", "key")
		} else if dig(e, "valueFrom", "fieldRef") != nil {
			v.Field = str(t, name, e, "valueFrom", "fieldRef", "fieldPath")
		} else {
			v.Value = fmt.Sprint(dig(e, "value"))
		}
		out[name] = v
	}
	return out
}
