// Package testbin builds the real syncd binary once for a test package, so
// that tests can drive it as a subprocess where signals, exit codes and
// crashes matter.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Build compiles cmd/syncd (with the given build tags) into a temporary
// folder and returns the binary's path and a function that removes it. On
// failure it prints the compiler's output and exits the test process.
// With SYNCD_TEST_RACE set (make test-race) the binary is built with the
// race detector too, and a race in it makes it exit 66 with the report on
// stderr, which fails the test that ran it.
func Build(tags ...string) (path string, cleanup func()) {
	path, cleanup, err := BuildE(tags...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return path, cleanup
}

// BuildE is Build returning an error (with the compiler's output) instead
// of exiting, for a binary built lazily by the first test that needs it.
func BuildE(tags ...string) (path string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "syncd-bin-")
	if err != nil {
		return "", nil, fmt.Errorf("make a folder for the syncd binary: %w", err)
	}
	path = filepath.Join(dir, "syncd")
	args := []string{"build", "-o", path}
	if os.Getenv("SYNCD_TEST_RACE") != "" {
		args = append(args, "-race")
	}
	for _, t := range tags {
		args = append(args, "-tags", t)
	}
	cmd := exec.Command("go", append(args, "github.com/syncd/syncd/cmd/syncd")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build syncd for the tests: %w\n%s", err, out)
	}
	return path, func() { os.RemoveAll(dir) }, nil
}
