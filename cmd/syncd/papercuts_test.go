package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/syncd/syncd/internal/pgtest"
)

// -v prints the version like --version and version; a bad flag is named
// as the help writes flags, --name, whichever way it was typed, and exits 2
// with one line on stderr and nothing on stdout.
func TestVersionShortFlagAndFlagErrors(t *testing.T) {
	want := bin.Run(t, nil, "version")
	for _, args := range [][]string{{"-v"}, {"--version"}, {"-version"}} {
		if r := bin.Run(t, nil, args...); r.Code != 0 || r.Stdout != want.Stdout || r.Stderr != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 0 and %q", args, r.Code, r.Stdout, r.Stderr, want.Stdout)
		}
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--bogus"}, "syncd run: flag provided but not defined: --bogus; run `syncd run --help` for its flags: usage error\n"},
		{[]string{"run", "-bogus"}, "syncd run: flag provided but not defined: --bogus; run `syncd run --help` for its flags: usage error\n"},
		{[]string{"status", "--state"}, "syncd status: flag needs an argument: --state; run `syncd status --help` for its flags: usage error\n"},
		{[]string{"run", "--once=maybe"}, "syncd run: invalid boolean value \"maybe\" for --once: parse error; run `syncd run --help` for its flags: usage error\n"},
		{[]string{"completion", "-zsh"}, "syncd completion: flag provided but not defined: --zsh: usage error\n"},
		// A one-letter flag is typed, and named, -o.
		{[]string{"status", "-o"}, "syncd status: flag needs an argument: -o; run `syncd status --help` for its flags: usage error\n"},
	}
	for _, tc := range cases {
		r := bin.Run(t, nil, tc.args...)
		if r.Code != 2 || r.Stdout != "" || r.Stderr != tc.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q\nwant exit 2 and stderr %q", tc.args, r.Code, r.Stdout, r.Stderr, tc.want)
		}
	}
}

// Without --config the commands read $SYNCD_CONFIG, else /etc/syncd; with
// none of them they exit 2 naming both and how to set them.
func TestDefaultConfigPath(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	writeConfig(t, dir, "orders.yaml", orders(t, src, dst, ""))
	state := filepath.Join(dir, "state.db")
	env := []string{"SYNCD_CONFIG=" + dir, "SYNCD_STATE=" + state}
	if r := bin.Run(t, env, "run", "--once"); r.Code != 0 {
		t.Fatalf("run --once with $SYNCD_CONFIG: exit %d: %s", r.Code, r.Stderr)
	}
	if r := bin.Run(t, env, "status"); r.Code != 0 || !strings.HasPrefix(strings.SplitN(r.Stdout, "\n", 2)[1], "orders ") {
		t.Fatalf("status with $SYNCD_CONFIG: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	// --config wins over $SYNCD_CONFIG.
	r := bin.Run(t, []string{"SYNCD_CONFIG=" + filepath.Join(dir, "nope"), "SYNCD_STATE=" + state}, "status", "--config", dir)
	if r.Code != 0 || !strings.Contains(r.Stdout, "orders ") {
		t.Fatalf("status --config over a wrong $SYNCD_CONFIG: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	r = bin.Run(t, []string{"SYNCD_CONFIG=" + filepath.Join(dir, "nope")}, "status")
	if want := "syncd status: $SYNCD_CONFIG names " + filepath.Join(dir, "nope") + ": stat " + filepath.Join(dir, "nope") +
		": no such file or directory; point it (or --config) at a source file or a folder of them: usage error\n"; r.Code != 2 || r.Stderr != want {
		t.Fatalf("a missing $SYNCD_CONFIG: exit %d, stderr %q\nwant exit 2, %q", r.Code, r.Stderr, want)
	}
	if _, err := os.Stat("/etc/syncd"); err == nil {
		t.Skip("/etc/syncd exists on this machine: the error without any config cannot be checked")
	}
	for _, cmd := range []string{"run", "status", "validate", "resync", "reconcile"} {
		r := bin.Run(t, []string{"SYNCD_CONFIG="}, cmd)
		want := "syncd " + cmd + ": --config is required: it was not given, $SYNCD_CONFIG is not set and /etc/syncd does not exist; " +
			"pass --config FILE or FOLDER, set SYNCD_CONFIG, or put the source files (*.yaml) in /etc/syncd: usage error\n"
		if r.Code != 2 || r.Stdout != "" || r.Stderr != want {
			t.Errorf("%s without a config: exit %d, stdout %q, stderr %q\nwant exit 2, %q", cmd, r.Code, r.Stdout, r.Stderr, want)
		}
	}
}

// The default status table fits 120 columns with realistic values (names
// of 21 characters, a resync's "from" watermark, a failed run): the last
// run is an age, durations are compact (328d), the failed run's error is on
// a line of its own below the table; -o wide has every column at full
// length, and -o json is --json.
func TestStatusTableFits120Columns(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	for _, tbl := range []string{"order_items", "stock_levels"} {
		src.Exec(t, `CREATE TABLE `+tbl+` (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL)`)
		src.Exec(t, `INSERT INTO `+tbl+` SELECT g, now() - interval '328 days 3 hours' + g * interval '1 microsecond' FROM generate_series(1, 1234) g`)
	}
	dir := t.TempDir()
	source := func(name, dsn, table string) {
		writeConfig(t, dir, name+".yaml", fmt.Sprintf("name: %s\nsource:\n  dsn: %s\n  table: public.%s\n  cursor: [updated_at, id]\n  lookback: 0s\nsink:\n  dsn: %s\n  table: public.%s_copy\n  key: [id]\n",
			name, dsn, table, dst.URL, table))
	}
	source("warehouse_order_items", src.URL, "order_items")
	source("warehouse_stock_level", src.URL, "stock_levels")
	source("warehouse_unreachable", "postgres://postgres@127.0.0.1:1/none?connect_timeout=2", "gone")
	env := []string{"SYNCD_CONFIG=" + dir, "SYNCD_STATE=" + filepath.Join(dir, "state.db")}
	if r := bin.Run(t, env, "run", "--once"); r.Code != 1 {
		t.Fatalf("run --once with an unreachable source: exit %d, want 1: %s", r.Code, r.Stderr)
	}
	if r := bin.Run(t, env, "resync", "--source", "warehouse_stock_level", "--from", "2026-01-02T03:04:05.123456Z", "--skip-rows"); r.Code != 0 {
		t.Fatalf("resync: exit %d: %s", r.Code, r.Stderr)
	}

	r := bin.Run(t, env, "status")
	if r.Code != 0 {
		t.Fatalf("status: exit %d: %s", r.Code, r.Stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	if len(lines) < 5 {
		t.Fatalf("status: want a header, 3 sources and the failed run's line:\n%s", r.Stdout)
	}
	for _, l := range lines[:4] {
		if n := utf8.RuneCountInString(l); n > 120 {
			t.Errorf("a line of the status table is %d columns wide, want at most 120:\n%s", n, l)
		}
	}
	fields := func(l string) []string { return regexp.MustCompile(`  +`).Split(strings.TrimSpace(l), -1) }
	if got, want := strings.Join(fields(lines[0]), "|"), "SOURCE|WATERMARK|LAST RUN|STATUS|FRESHNESS|ROWS LAST RUN|NEWEST ROW AGE"; got != want {
		t.Errorf("status header %q, want %q", got, want)
	}
	// Seconds at most on a quick machine; minutes allowed on a slow one.
	short := regexp.MustCompile(`^(\d+ms|\d+(\.\d)?s|\d+m\d+s)$`)
	ago := regexp.MustCompile(short.String()[:len(short.String())-1] + ` ago$`)
	f := fields(lines[1])
	if len(f) != 7 || f[0] != "warehouse_order_items" || !strings.HasSuffix(f[1], "Z") || !ago.MatchString(f[2]) || f[3] != "ok" ||
		!short.MatchString(f[4]) || f[5] != "1234" || f[6] != "328d" {
		t.Errorf("status line of an ok source: %q", f)
	}
	f = fields(lines[2])
	if len(f) != 7 || f[1] != "from 2026-01-02T03:04:05.123456Z" || f[3] != "ok" || f[5] != "1234" {
		t.Errorf("status line of a resynced source: %q", f)
	}
	f = fields(lines[3])
	if len(f) != 7 || f[0] != "warehouse_unreachable" || f[1] != "-" || f[3] != "failed" || f[4] != "-" || f[5] != "0" || f[6] != "-" {
		t.Errorf("status line of a failed source: %q", f)
	}
	unreachable := filepath.Join(dir, "warehouse_unreachable.yaml") + ":3: source.dsn: cannot connect to the source at 127.0.0.1:1 (database none, user postgres): connection refused"
	if !strings.HasPrefix(lines[4], "warehouse_unreachable: last run failed: "+unreachable) {
		t.Errorf("the failed run's error below the table: %q", lines[4])
	}

	wide := bin.Run(t, env, "status", "-o", "wide")
	lines = strings.Split(wide.Stdout, "\n")
	if got, want := strings.Join(fields(lines[0]), "|"), "SOURCE|WATERMARK|LAST RUN|STATUS|FRESHNESS|ROWS LAST RUN|ROWS WRITTEN|NEWEST ROW AGE|BOUND"; wide.Code != 0 || got != want {
		t.Fatalf("status -o wide: exit %d, header %q, want %q", wide.Code, got, want)
	}
	if f := fields(lines[1]); len(f) != 9 || !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`).MatchString(f[2]) || f[6] != "1234" || f[7] != "328d" || !strings.HasSuffix(f[8], "Z") {
		t.Errorf("status -o wide line of an ok source: %q", f)
	}
	if len(lines) != 5 || !strings.Contains(lines[3], "  failed: "+unreachable) || strings.Contains(wide.Stdout, "last run failed") {
		t.Errorf("status -o wide: the error belongs in the STATUS column:\n%s", wide.Stdout)
	}

	var asJSON, asO struct {
		Sources []map[string]any `json:"sources"`
	}
	j, o := bin.Run(t, env, "status", "--json"), bin.Run(t, env, "status", "-o", "json")
	if err := json.Unmarshal([]byte(j.Stdout), &asJSON); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(o.Stdout), &asO); err != nil || o.Code != 0 || len(asO.Sources) != 3 {
		t.Fatalf("status -o json: exit %d, %v\n%s", o.Code, err, o.Stdout)
	}
	for i := range asO.Sources {
		for _, m := range []map[string]any{asJSON.Sources[i], asO.Sources[i]} {
			delete(m, "freshness_seconds")
			delete(m, "newest_row_age_seconds")
		}
		if !reflect.DeepEqual(asJSON.Sources[i], asO.Sources[i]) {
			t.Errorf("status -o json differs from --json:\n%v\n%v", asO.Sources[i], asJSON.Sources[i])
		}
	}
	if r := bin.Run(t, env, "status", "-o", "wide", "--json"); r.Code != 2 || r.Stderr != "syncd status: --json and -o wide ask for two formats: give one: usage error\n" {
		t.Errorf("status -o wide --json: exit %d, stderr %q", r.Code, r.Stderr)
	}
	if r := bin.Run(t, env, "status", "--output", "yaml"); r.Code != 2 || r.Stderr != "syncd status: -o \"yaml\": use text, wide or json: usage error\n" {
		t.Errorf("status --output yaml: exit %d, stderr %q", r.Code, r.Stderr)
	}
}

// A badly indented line in a source file exits 2 with one line that points
// at that line and says to check the indentation.
func TestYAMLIndentationErrors(t *testing.T) {
	const good = "name: orders\nsource:\n  dsn: postgres://127.0.0.1/src\n  table: public.orders\n  cursor:\n    - updated_at\n    - id\n  page_size: 50\nsink:\n  dsn: postgres://127.0.0.1/dst\n  table: public.orders_copy\n"
	cases := []struct {
		name, from, to, want string
	}{
		{"a key one space too many", "  page_size: 50", "   page_size: 50",
			"orders.yaml:8: check the indentation: this line is indented differently from the keys above it (yaml: did not find expected key)"},
		{"a key one space too many after a value", "  table: public.orders\n", "  table: public.orders\n   page_size: 50\n",
			"orders.yaml:5: check the indentation: this line is indented more than the line above it, which has its value already (yaml: mapping values are not allowed in this context)"},
		{"a key one space too few", "  table: public.orders\n", " table: public.orders\n",
			"orders.yaml:4: check the indentation: this line is indented differently from the keys above it (yaml: did not find expected key)"},
		{"a tab", "  table: public.orders_copy", "\ttable: public.orders_copy",
			"orders.yaml:11: check the indentation: this line is indented with a tab; YAML indents with spaces only (yaml: found a tab character that violates indentation)"},
		{"a list item misaligned", "    - id", "   - id",
			"orders.yaml:7: check the indentation: this line is indented differently from the keys above it (yaml: did not find expected key)"},
		{"a top-level key indented", "sink:", " sink:",
			"orders.yaml:9: check the indentation: this line is indented differently from the keys above it (yaml: did not find expected key)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeConfig(t, dir, "orders.yaml", strings.Replace(good, tc.from, tc.to, 1))
			for _, cmd := range []string{"validate", "status"} {
				r := bin.Run(t, nil, cmd, "--config", cfg, "--state", filepath.Join(dir, "s.db"))
				if want := "syncd " + cmd + ": " + filepath.Join(dir, tc.want) + "\n"; r.Code != 2 || r.Stderr != want {
					t.Errorf("%s: exit %d, stderr %q\nwant exit 2, %q", cmd, r.Code, r.Stderr, want)
				}
			}
		})
	}
}

// The completion scripts, run by the real shells, complete a flag's value
// instead of offering flags: files and folders for --config (*.yaml and
// *.yml only in bash) and --state, the words of --log-format, --log-level
// and -o, the source names of the config for --source (read by syncd
// itself, without DSNs or variables), and nothing for --from.
func TestCompletionInRealShells(t *testing.T) {
	dir := t.TempDir()
	for f, body := range map[string]string{
		"conf/a.yaml": "name: orders\nsource:\n  dsn: ${SYNCD_UNSET_FOR_TEST}\n---\nname: items\n", "conf/b.yml": "name: shop\n",
		"conf/readme.md": "", "notes.txt": "", "state.db": "", "top.yaml": "", "sub/x": "",
	} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeConfig(t, dir, f, body)
	}
	env := []string{"PATH=" + filepath.Dir(binary) + string(os.PathListSeparator) + os.Getenv("PATH"), "SYNCD_CONFIG="}

	if r := bin.Run(t, nil, "__complete", "sources", "run", "--config", filepath.Join(dir, "conf"), "--source", ""); r.Code != 0 || r.Stdout != "items\norders\nshop\n" {
		t.Fatalf("__complete sources: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if r := bin.Run(t, nil, "__complete", "sources", "--config", filepath.Join(dir, "nope")); r.Code != 0 || r.Stdout != "" {
		t.Fatalf("__complete sources of a missing config: exit %d, stdout %q", r.Code, r.Stdout)
	}
	// A shell runs a script in dir with env; out is its output's lines, sorted.
	shell := func(name string, args ...string) []string {
		t.Helper()
		c := exec.Command(name, args...)
		c.Dir, c.Env = dir, append(os.Environ(), env...)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", name, args, err, out)
		}
		lines := strings.Fields(string(out))
		sort.Strings(lines)
		return lines
	}
	script := func(sh string) string {
		r := bin.Run(t, nil, "completion", sh)
		return writeConfig(t, t.TempDir(), "syncd."+sh, r.Stdout)
	}
	type tc struct {
		words []string // COMP_WORDS after "syncd", the last one being completed
		want  string
	}
	bashCases := []tc{
		{[]string{"status", "--config", ""}, "conf sub top.yaml"},
		{[]string{"status", "--config", "conf/"}, "conf/a.yaml conf/b.yml"},
		{[]string{"status", "--state", ""}, "conf notes.txt state.db sub top.yaml"},
		{[]string{"status", "--log-format", ""}, "json text"},
		{[]string{"status", "--log-format", "=", "j"}, "json"},
		{[]string{"run", "--log-level", "w"}, "warn"},
		{[]string{"status", "-o", ""}, "json text wide"},
		{[]string{"status", "--output", "w"}, "wide"},
		{[]string{"run", "--config", "conf", "--source", ""}, "items orders shop"},
		{[]string{"reconcile", "--config", "=", "conf", "--source", "o"}, "orders"},
		{[]string{"run", "--from", ""}, ""},
		{[]string{"resync", "--fr"}, "--from --from-start"},
		{[]string{"st"}, "status"},
	}
	bash := script("bash")
	for _, c := range bashCases {
		words := "syncd"
		for _, w := range c.words {
			words += " '" + w + "'"
		}
		got := shell("bash", "--norc", "--noprofile", "-c", fmt.Sprintf(`source %s; COMP_WORDS=(%s); COMP_CWORD=%d; _syncd; printf '%%s\n' "${COMPREPLY[@]}"`, bash, words, len(c.words)))
		if strings.Join(got, " ") != c.want {
			t.Errorf("bash: completing %q: %q, want %q", c.words, got, c.want)
		}
	}
	// SYNCD_CONFIG names the config when --config is not typed.
	env[1] = "SYNCD_CONFIG=" + filepath.Join(dir, "conf")
	if got := shell("bash", "--norc", "-c", "source "+bash+`; COMP_WORDS=(syncd resync --source ""); COMP_CWORD=3; _syncd; echo "${COMPREPLY[@]}"`); strings.Join(got, " ") != "items orders shop" {
		t.Errorf("bash: completing resync --source with $SYNCD_CONFIG: %q", got)
	}
	env[1] = "SYNCD_CONFIG="

	if _, err := exec.LookPath("zsh"); err != nil {
		t.Log("zsh is not installed: its completion is not tried")
	} else {
		// zsh runs the bash function through bashcompinit, which leaves
		// matching the word typed to zsh: the values come unfiltered.
		zsh := script("zsh")
		for _, c := range []tc{
			{[]string{"status", "--log-format", ""}, "json text"},
			{[]string{"status", "--config", ""}, "conf sub top.yaml"},
			{[]string{"status", "-o", ""}, "json text wide"},
			{[]string{"run", "--config", "conf", "--source", ""}, "items orders shop"},
			{[]string{"run", "--from", ""}, ""},
		} {
			args := append([]string{"-f", "-c", `autoload -U compinit && compinit -u -D; source ` + zsh + `
f() { emulate -L sh; setopt kshglob noshglob braceexpand; COMP_WORDS=(syncd "$@"); COMP_CWORD=$(($#)); _syncd; print -rl -- "${COMPREPLY[@]}"; }
f "$@"`, "zsh"}, c.words...)
			got := shell("zsh", args...)
			if strings.Join(got, " ") != c.want {
				t.Errorf("zsh: completing %q: %q, want %q", c.words, got, c.want)
			}
		}
	}

	if _, err := exec.LookPath("fish"); err != nil {
		t.Log("fish is not installed: its completion is not tried")
	} else {
		fish := script("fish")
		for _, c := range []struct{ line, want string }{
			{"syncd status --log-format ", "json text"},
			{"syncd run --log-level d", "debug"},
			{"syncd status -o ", "json text wide"},
			{"syncd status --config ", "conf/ notes.txt state.db sub/ top.yaml"},
			{"syncd run --config conf --source ", "items orders shop"},
			{"syncd run --from ", ""},
			{"syncd resync --fr", "--from --from-start"},
		} {
			got := shell("fish", "--no-config", "-c", "source "+fish+"; complete -C '"+c.line+"' | cut -f1")
			if strings.Join(got, " ") != c.want {
				t.Errorf("fish: completing %q: %q, want %q", c.line, got, c.want)
			}
		}
	}
}
