package main_test

import (
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
