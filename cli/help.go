package cli

import (
	"bytes"
	"context"
	"flag"
	"io"
	"regexp"
	"sort"
	"strings"
)

// helpText is each command's synopsis and description, printed by
// `syncd CMD --help` and `syncd help CMD` above its flags. README.md's
// command reference holds the same text (a test compares them).
var helpText = map[string]string{
	"run": `Usage: syncd run [--config PATH] [flags]

Without --once, run is a daemon: it runs each source on its schedule until
SIGTERM/SIGINT (SIGHUP reloads the configs) and serves /healthz /readyz
/metrics /status on --listen. With --once it syncs every source (or
--source) until caught up and exits: 0 when every source synced, 1 when one
failed or a table of a pattern source was skipped, 2 for a bad config.
--source NAME takes a source, a pattern source (all its tables) or one table
of it (NAME.TABLE).
`,
	"resync": `Usage: syncd resync [--config PATH] --source NAME (--from RFC3339 | --from-start) [flags]

Moves a source's watermark back: the next run re-reads every row whose first
cursor column is at or after --from, or the whole source with --from-start.
A --from after the watermark would move it forward and the rows between
would never be copied: that is refused (exit 2, the state unchanged) unless
--skip-rows says to skip them; the line printed says which way it moved.
When a daemon holds the state file, the request goes to that daemon, through
its admin socket STATE.sock (or over TCP with --listen).
`,
	"status": `Usage: syncd status [--config PATH] [flags]

Prints each source's watermark, last run (or progress), freshness, rows and
read bound, from the state file or from the daemon that holds it (through
its admin socket STATE.sock, or over TCP with --listen). It reads no
database and needs no DSN variable, unless --sink: then it also reads each
copy's record in its sink database (which source writes it, up to where)
and shows it beside the state file's watermark. It never creates or
changes the state file: a missing one is an error (exit 2) that names the
path. The table fits 120 columns, a failed run's error and a running
source's progress on a line of their own below it; -o wide adds the rows
written and the read bound, every value at full length; -o json (or
--json) prints it all as JSON.

--fleet shows the fleet instead, from any replica: every copy of the
configured sources (each table of a pattern source too) as its sink
database records it, whichever process ran it: the writer that last
claimed it (HOST pid PID), whether a run holds its lock now, the cursor of
the last page applied and how long ago, by the sink's clock, a page or a
hand-over last moved it, and its last run: how long ago it ended, whether
it caught up, and the copy's lag behind the source (an idle run records
itself at most every 30 s or schedule period, whichever is longer,
$SYNCD_RECORD_EVERY; a run with pages, with its last page). A record that
nothing moved for three of those intervals is marked stale, with a line
below the table: its replica is gone, or one run has been going that long.
It reads the sinks, not the state file; a sink that cannot be read is
named below the table, and the exit code is 1.
`,
	"validate": `Usage: syncd validate [--config PATH] [flags]

Checks every source against its databases without writing anything: the
table, the columns, the cursor and its tie-breaker, the copy, and whether
the page query is an index scan, and shows the sink's record of each copy
beside the state file's watermark. A copy that another source writes (in
the sink's record, or in the configs loaded together) exits 2. A pattern
source lists the tables it matches; a table it would skip is reported and
makes validate exit 1.
`,
	"reconcile": `Usage: syncd reconcile [--config PATH] (--source NAME | --all) [--keys] [--repair] [--json] [flags]

Compares the copy with the source value by value up to the watermark and
exits 1 when they differ. Without --repair it writes nothing; a missing
state file is an error (exit 2) that names the path. --all checks every
source of the config, one summary line each (--json: an array), and exits
0 only when every copy equals its source.

--keys compares the key sets only, from the key indexes, at a fraction of
the cost: it finds rows deleted at the source (extra in the copy; --repair
deletes them) and keys the copy lacks (reported: the sync or the full
reconcile writes them), not changed values. It exits as reconcile does.
`,
	"version": `Usage: syncd version

Prints the version (also: syncd -v, syncd --version).
`,
	"completion": `Usage: syncd completion bash|zsh|fish

Prints a shell completion script, for example:
  syncd completion bash > /etc/bash_completion.d/syncd
  syncd completion zsh > "${fpath[1]}/_syncd"
  syncd completion fish > ~/.config/fish/completions/syncd.fish
`,
}

// help renders a command's help: its text, then its flags.
func help(fs *flag.FlagSet) string {
	var b bytes.Buffer
	b.WriteString(helpText[strings.TrimPrefix(fs.Name(), "syncd ")])
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		var f bytes.Buffer
		fs.SetOutput(&f)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
		// Written as people type them: --flag.
		b.WriteString("\nFlags:\n")
		flags := strings.ReplaceAll("\n"+f.String(), "\n  -", "\n  --")[1:]
		flags = shortFlag.ReplaceAllString(flags, "$1-$2$3")
		b.WriteString(strings.ReplaceAll(flags, "    \t", "      "))
	}
	return b.String()
}

// shortFlag finds a one-letter flag in the help, which is typed -x.
var shortFlag = regexp.MustCompile(`(?m)^(  )--([a-zA-Z])([ \t]|$)`)

// commandNames lists the commands, sorted.
func commandNames() []string {
	var out []string
	for name := range commands {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// commandFlags returns the flag set of command name, read by asking the
// command for its help with the output thrown away.
func commandFlags(name string) *flag.FlagSet {
	var fs *flag.FlagSet
	env := &Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) (string, bool) { return "", false }, flags: &fs}
	env.scrub = &scrubber{w: io.Discard}
	_ = commands[name](context.Background(), env, []string{"--help"})
	return fs
}

// Help returns the help that `syncd CMD --help` prints.
func Help(name string) string {
	fs := commandFlags(name)
	if fs == nil {
		return helpText[name]
	}
	return help(fs)
}
