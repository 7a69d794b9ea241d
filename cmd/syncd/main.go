// Command syncd keeps copies of PostgreSQL tables in sync. All the work
// lives in package cli; main only wires the process to it and maps the
// outcome to an exit code.
package main

import (
	"context"
	"os"

	"github.com/syncd/syncd/cli"
)

func main() {
	env := &cli.Env{Stdout: os.Stdout, Stderr: os.Stderr}
	err := cli.Run(context.Background(), env, os.Args[1:])
	os.Exit(cli.ExitCode(err))
}
