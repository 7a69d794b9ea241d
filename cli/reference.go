package cli

import (
	"bytes"
	"context"
	"slices"
	"strings"
)

// referenceOrder is the order of the commands in the command reference:
// the ones a newcomer meets first, then any other command, sorted.
var referenceOrder = []string{"run", "validate", "status", "resync", "reconcile"}

// Reference returns the command reference of docs/CLI.md, in Markdown:
// `syncd --help`, then each command's `--help`, as the binary prints them
// with no SYNCD_* variable set. Regenerate the file with `make docs`.
func Reference() string {
	names := slices.Clone(referenceOrder)
	for _, n := range commandNames() {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	var b strings.Builder
	b.WriteString("### syncd\n\n```\n$ syncd --help\n" + printedHelp("--help") + "```\n")
	for _, n := range names {
		if _, ok := commands[n]; !ok {
			continue
		}
		b.WriteString("\n### syncd " + n + "\n\n```\n$ syncd " + n + " --help\n" + printedHelp(n, "--help") + "```\n")
	}
	return b.String()
}

// printedHelp runs a command line that prints help and returns its stdout.
func printedHelp(args ...string) string {
	var out bytes.Buffer
	env := &Env{Stdout: &out, Stderr: &bytes.Buffer{}, Getenv: func(string) (string, bool) { return "", false }}
	_ = Run(context.Background(), env, args)
	return out.String()
}
