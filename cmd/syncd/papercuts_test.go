package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -v prints the version like --version and version; a bad flag is named
// as the help writes flags, --name, whichever way it was typed, and exits 2
// with one line on stderr and nothing on stdout.
func TestVersionShortFlagAndFlagErrors(t *testing.T) {
	want := syncd(t, nil, "version")
	for _, args := range [][]string{{"-v"}, {"--version"}, {"-version"}} {
		if r := syncd(t, nil, args...); r.code != 0 || r.stdout != want.stdout || r.stderr != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 0 and %q", args, r.code, r.stdout, r.stderr, want.stdout)
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
		{[]string{"completion", "-x"}, "syncd completion: flag provided but not defined: --x: usage error\n"},
	}
	for _, tc := range cases {
		r := syncd(t, nil, tc.args...)
		if r.code != 2 || r.stdout != "" || r.stderr != tc.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q\nwant exit 2 and stderr %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
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
	if r := syncd(t, env, "run", "--once"); r.code != 0 {
		t.Fatalf("run --once with $SYNCD_CONFIG: exit %d: %s", r.code, r.stderr)
	}
	if r := syncd(t, env, "status"); r.code != 0 || !strings.HasPrefix(strings.SplitN(r.stdout, "\n", 2)[1], "orders ") {
		t.Fatalf("status with $SYNCD_CONFIG: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// --config wins over $SYNCD_CONFIG.
	r := syncd(t, []string{"SYNCD_CONFIG=" + filepath.Join(dir, "nope"), "SYNCD_STATE=" + state}, "status", "--config", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "orders ") {
		t.Fatalf("status --config over a wrong $SYNCD_CONFIG: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = syncd(t, []string{"SYNCD_CONFIG=" + filepath.Join(dir, "nope")}, "status")
	if want := "syncd status: $SYNCD_CONFIG names " + filepath.Join(dir, "nope") + ": stat " + filepath.Join(dir, "nope") +
		": no such file or directory; point it (or --config) at a source file or a folder of them: usage error\n"; r.code != 2 || r.stderr != want {
		t.Fatalf("a missing $SYNCD_CONFIG: exit %d, stderr %q\nwant exit 2, %q", r.code, r.stderr, want)
	}
	if _, err := os.Stat("/etc/syncd"); err == nil {
		t.Skip("/etc/syncd exists on this machine: the error without any config cannot be checked")
	}
	for _, cmd := range []string{"run", "status", "validate", "resync", "reconcile"} {
		r := syncd(t, []string{"SYNCD_CONFIG="}, cmd)
		want := "syncd " + cmd + ": --config is required: it was not given, $SYNCD_CONFIG is not set and /etc/syncd does not exist; " +
			"pass --config FILE or FOLDER, set SYNCD_CONFIG, or put the source files (*.yaml) in /etc/syncd: usage error\n"
		if r.code != 2 || r.stdout != "" || r.stderr != want {
			t.Errorf("%s without a config: exit %d, stdout %q, stderr %q\nwant exit 2, %q", cmd, r.code, r.stdout, r.stderr, want)
		}
	}
}
