package main_test

import (
	"bytes"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/cli"
	"github.com/syncd/syncd/internal/docgen"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/watermark"
)

var commandNames = []string{"run", "resync", "status", "validate", "reconcile", "version", "completion"}

// --version, version, CMD --help, CMD -h and help CMD print to stdout and
// exit 0; the completion scripts are valid shell.
func TestVersionHelpCompletion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		if r := bin.Run(t, nil, args...); r.Code != 0 || !strings.HasPrefix(r.Stdout, "syncd ") || r.Stderr != "" {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, r.Code, r.Stdout, r.Stderr)
		}
	}
	for _, cmd := range commandNames {
		long := bin.Run(t, nil, cmd, "--help")
		if long.Code != 0 || !strings.HasPrefix(long.Stdout, "Usage: syncd "+cmd) || long.Stderr != "" {
			t.Fatalf("%s --help: exit %d, stdout %q, stderr %q", cmd, long.Code, long.Stdout, long.Stderr)
		}
		for _, args := range [][]string{{cmd, "-h"}, {"help", cmd}} {
			if r := bin.Run(t, nil, args...); r.Code != 0 || r.Stdout != long.Stdout || r.Stderr != "" {
				t.Fatalf("%v: exit %d, stdout differs from %s --help: %q", args, r.Code, cmd, r.Stdout)
			}
		}
	}
	if r := bin.Run(t, nil, "run", "--bogus"); r.Code != 2 || r.Stdout != "" || !strings.Contains(r.Stderr, "syncd run --help") {
		t.Fatalf("bad flag: exit %d, stdout %q, stderr %q; want 2, one line on stderr", r.Code, r.Stdout, r.Stderr)
	}
	bash := bin.Run(t, nil, "completion", "bash")
	if bash.Code != 0 || !strings.Contains(bash.Stdout, "complete -F _syncd syncd") || !strings.Contains(bash.Stdout, "--from-start") {
		t.Fatalf("completion bash: exit %d\n%s", bash.Code, bash.Stdout)
	}
	check := exec.Command("bash", "-n")
	check.Stdin = strings.NewReader(bash.Stdout)
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("bash -n on the completion script: %v\n%s", err, out)
	}
	// Completing "syncd resync --fr" offers --from and --from-start.
	probe := exec.Command("bash", "-c", bash.Stdout+"\nCOMP_WORDS=(syncd resync --fr); COMP_CWORD=2; _syncd; echo \"${COMPREPLY[*]}\"")
	if out, err := probe.Output(); err != nil || strings.TrimSpace(string(out)) != "--from --from-start" {
		t.Fatalf("bash completion of 'syncd resync --fr': %q, %v", out, err)
	}
	for _, sh := range []string{"zsh", "fish"} {
		if r := bin.Run(t, nil, "completion", sh); r.Code != 0 || !strings.Contains(r.Stdout, "syncd") {
			t.Fatalf("completion %s: exit %d %q", sh, r.Code, r.Stderr)
		}
		if path, err := exec.LookPath(sh); err == nil {
			r := bin.Run(t, nil, "completion", sh)
			c := exec.Command(path, "-n")
			if sh == "fish" {
				c = exec.Command(path, "--no-execute")
			}
			c.Stdin = strings.NewReader(r.Stdout)
			if out, err := c.CombinedOutput(); err != nil {
				t.Fatalf("%s does not parse its completion script: %v\n%s", sh, err, out)
			}
		}
	}
	if r := bin.Run(t, nil, "completion", "tcsh"); r.Code != 2 {
		t.Fatalf("completion tcsh: exit %d, want 2", r.Code)
	}
}

// docs/CLI.md holds the command reference that `make docs` generates from
// the code, and every `$ syncd ... --help` block in it is what the binary
// prints.
func TestCLIReference(t *testing.T) {
	const file = "../../docs/CLI.md"
	doc, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want, err := docgen.Splice(doc, []byte(cli.Reference()))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if !bytes.Equal(doc, want) {
		t.Errorf("docs/CLI.md differs from the help the code prints: run make docs and commit docs/CLI.md")
	}
	blocks := regexp.MustCompile("(?s)```\n\\$ syncd ([^\n]*)\n(.*?)```\n").FindAllSubmatch(doc, -1)
	if len(blocks) < len(commandNames)+1 {
		t.Fatalf("docs/CLI.md has %d help blocks, want one for syncd and each of %v", len(blocks), commandNames)
	}
	for _, m := range blocks {
		args := strings.Fields(string(m[1]))
		r := bin.Run(t, nil, args...)
		if r.Code != 0 || r.Stdout != string(m[2]) {
			t.Errorf("syncd %s: exit %d, and docs/CLI.md does not hold what it prints: run make docs\n%s", m[1], r.Code, r.Stdout)
		}
	}
}

// --log-format and --log-level, each also from SYNCD_LOG_FORMAT and
// SYNCD_LOG_LEVEL, the flag winning; a bad value exits 2 before anything.
func TestLogFormatAndLevel(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, ""))
	state := filepath.Join(dir, "s.db")
	// format reports how stderr's lines are written: "text" or "json" when
	// every line is an slog record of that format with time, level and
	// msg, and at least one is at INFO; "" otherwise.
	format := func(stderr string) string {
		kind, info := "", false
		for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
			e, err := testutil.ParseLine(l)
			if err != nil || e.Text("time") == "" || e.Level() == "" {
				return ""
			}
			k := "text"
			if strings.HasPrefix(l, "{") {
				k = "json"
			}
			if kind != "" && k != kind {
				return ""
			}
			kind, info = k, info || e.Level() == "INFO"
		}
		if !info {
			return ""
		}
		return kind
	}

	r := bin.Run(t, []string{"SYNCD_LOG_FORMAT=text"}, "run", "--once", "--config", cfg, "--state", state)
	if r.Code != 0 || format(r.Stderr) != "text" {
		t.Fatalf("SYNCD_LOG_FORMAT=text: exit %d\n%s", r.Code, r.Stderr)
	}
	r = bin.Run(t, []string{"SYNCD_LOG_FORMAT=text"}, "run", "--once", "--config", cfg, "--state", state, "--log-format", "json")
	if r.Code != 0 || format(r.Stderr) != "json" {
		t.Fatalf("--log-format json over SYNCD_LOG_FORMAT=text: exit %d\n%s", r.Code, r.Stderr)
	}
	r = bin.Run(t, []string{"SYNCD_LOG_LEVEL=warn"}, "run", "--once", "--config", cfg, "--state", state, "--log-format", "json")
	if r.Code != 0 || countLevel(r.Stderr, "INFO") != 0 {
		t.Fatalf("SYNCD_LOG_LEVEL=warn still logs INFO: exit %d\n%s", r.Code, r.Stderr)
	}
	r = bin.Run(t, []string{"SYNCD_LOG_LEVEL=warn"}, "run", "--once", "--config", cfg, "--state", state, "--log-format", "json", "--log-level", "info")
	if r.Code != 0 || countLevel(r.Stderr, "INFO") == 0 {
		t.Fatalf("--log-level info over SYNCD_LOG_LEVEL=warn: exit %d\n%s", r.Code, r.Stderr)
	}
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"SYNCD_LOG_FORMAT=yaml"}, nil, `log format "yaml"`},
		{nil, []string{"--log-format", "xml"}, `log format "xml"`},
		{[]string{"SYNCD_LOG_LEVEL=loud"}, nil, `log level "loud"`},
		{nil, []string{"--log-level", "trace"}, `log level "trace"`},
	} {
		bad := filepath.Join(dir, "bad.db")
		r := bin.Run(t, c.env, append([]string{"run", "--once", "--config", cfg, "--state", bad}, c.args...)...)
		if r.Code != 2 || !strings.Contains(r.Stderr, c.want) {
			t.Fatalf("%v %v: exit %d, want 2 naming %s\n%s", c.env, c.args, r.Code, c.want, r.Stderr)
		}
		if _, err := os.Stat(bad); !os.IsNotExist(err) {
			t.Fatalf("%v %v: a bad log setting created the state file", c.env, c.args)
		}
	}
}

// countLevel counts the log records of stderr at level.
func countLevel(stderr, level string) int {
	n := 0
	for _, e := range testutil.ParseLines(stderr) {
		if e.Level() == level {
			n++
		}
	}
	return n
}

// status needs no DSN variable; status, validate and reconcile never create
// a state file, and a missing one is an error (exit 2) that names its path;
// status never changes one, reconcile only records its outcome.
func TestReadOnlyCommandsNeedNoDSNAndCreateNoStateFile(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	body := strings.NewReplacer(src.URL, "${SYNCD_TEST_SRC}", dst.URL, "${SYNCD_TEST_DST}").Replace(orders(t, src, dst, ""))
	cfg := writeConfig(t, dir, "orders.yaml", body)
	dsns := []string{"SYNCD_TEST_SRC=" + src.URL, "SYNCD_TEST_DST=" + dst.URL}
	missing := filepath.Join(dir, "missing.db")

	for _, args := range [][]string{
		{"status", "--config", cfg, "--state", missing},
		{"status", "--json", "--config", cfg, "--state", missing},
		{"reconcile", "--config", cfg, "--state", missing, "--source", "orders"},
	} {
		r := bin.Run(t, dsns, args...)
		if r.Code != 2 || !strings.Contains(r.Stderr, "no state file at "+missing) || !strings.Contains(r.Stderr, "syncd run") {
			t.Fatalf("%v: exit %d, want 2 naming %s\n%s", args, r.Code, missing, r.Stderr)
		}
		if _, err := os.Stat(missing); !os.IsNotExist(err) {
			t.Fatalf("%v created the state file", args)
		}
	}
	if r := bin.Run(t, dsns, "validate", "--config", cfg); r.Code != 0 {
		t.Fatalf("validate: exit %d\n%s", r.Code, r.Stderr)
	}
	if _, err := os.Stat("syncd.db"); !os.IsNotExist(err) {
		t.Fatal("validate created ./syncd.db")
	}

	state := filepath.Join(dir, "state.db")
	if r := bin.Run(t, dsns, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("run --once: exit %d\n%s", r.Code, r.Stderr)
	}
	before, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	// No DSN variable set: status still reads the state file.
	r := bin.Run(t, nil, "status", "--config", cfg, "--state", state)
	if r.Code != 0 || !strings.Contains(r.Stdout, "orders") || !strings.Contains(r.Stdout, "1000") {
		t.Fatalf("status without DSN variables: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	after, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("status changed the state file")
	}
	// reconcile records its outcome, and only that: the watermark stays.
	stBefore := readState(t, state, "orders")
	r = bin.Run(t, dsns, "reconcile", "--config", cfg, "--state", state, "--source", "orders")
	if r.Code != 0 || !strings.Contains(r.Stdout, "\nplan: checksums\n") {
		t.Fatalf("reconcile: exit %d, want 0 and its plan\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	stAfter := readState(t, state, "orders")
	if !slices.Equal(stAfter.Cursor, stBefore.Cursor) || stAfter.LastCleanReconcile.IsZero() || stAfter.LastReconcile == nil {
		t.Fatalf("after reconcile the state has watermark %v (was %v), last clean reconcile %v, last reconcile %+v; want the watermark kept and the clean reconcile recorded",
			stAfter.Cursor, stBefore.Cursor, stAfter.LastCleanReconcile, stAfter.LastReconcile)
	}
}

// readState reads the stored state of source name.
func readState(t *testing.T, path, name string) watermark.State {
	t.Helper()
	st, _, err := watermark.ReadState(path, name, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// An error from PostgreSQL during a run names the source and the file and
// line of the config key that caused it.
func TestRunErrorNamesSourceAndKey(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, "  where: \"nope = 1\""))
	r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", filepath.Join(dir, "s.db"))
	lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
	want := "syncd run: source orders: " + filepath.Join(dir, "orders.yaml") + ":8: source.where: "
	if r.Code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], want) || !strings.Contains(lines[0], `column "nope" does not exist`) {
		t.Fatalf("bad where: exit %d, stderr:\n%s\nwant one line starting %q", r.Code, r.Stderr, want)
	}
	if n := count(t, dst, "SELECT count(*) FROM pg_tables WHERE tablename = 'orders_copy'"); n == 1 {
		if rows := count(t, dst, "SELECT count(*) FROM orders_copy"); rows != 0 {
			t.Fatalf("a failed run left %d rows in the copy", rows)
		}
	}
}

// scripts/demo.sh never drops a database it did not create.
func TestDemoLeavesForeignDatabaseAlone(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE precious (id int)`)
	db.Exec(t, `INSERT INTO precious VALUES (1), (2), (3)`)
	cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", "demo.sh"))
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	// The demo talks to the server the test database is on.
	cmd.Env = append(os.Environ(), "DEMO_DB="+db.Name, "BIN="+binary, "PGHOST="+u.Hostname(), "PGPORT="+u.Port(), "PGUSER="+u.User.Username())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "was not created by the demo") {
		t.Fatalf("demo with DEMO_DB naming a foreign database: %v\n%s", err, out)
	}
	if n := count(t, db, "SELECT count(*) FROM precious"); n != 3 {
		t.Fatalf("the foreign database lost rows: %d, want 3", n)
	}
}

// validate names the source and the key of a where clause PostgreSQL refuses.
func TestValidateNamesWhereKey(t *testing.T) {
	src, dst := setupOrders(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, "  where: \"id >\""))
	r := bin.Run(t, nil, "validate", "--config", cfg)
	want := "syncd validate: source orders: " + filepath.Join(dir, "orders.yaml") + ":8: source.where: "
	if r.Code != 1 || !strings.HasPrefix(r.Stderr, want) || !strings.Contains(r.Stderr, "syntax error") {
		t.Fatalf("validate with a bad where: exit %d, stderr %q, want it to start with %q", r.Code, r.Stderr, want)
	}
}
