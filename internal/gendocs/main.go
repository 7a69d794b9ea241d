// Command gendocs regenerates the parts of the docs that are made from the
// code: the command reference in docs/CLI.md (from each command's --help)
// and the key reference in docs/CONFIG.md with docs/syncd.schema.json
// (from the config structs and config/configdoc). Run it from the
// repository's root: make docs.
package main

import (
	"fmt"
	"os"

	"github.com/syncd/syncd/cli"
	"github.com/syncd/syncd/config/configdoc"
	"github.com/syncd/syncd/internal/docgen"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}

func run() error {
	if err := splice("docs/CLI.md", cli.Reference()); err != nil {
		return err
	}
	// With the keys of the kinds syncd is built with (cli.DefaultKinds).
	sinks := cli.DefaultKinds().Sinks()
	if err := splice("docs/CONFIG.md", configdoc.ReferenceWith(sinks)); err != nil {
		return err
	}
	return os.WriteFile("docs/syncd.schema.json", configdoc.SchemaWith(sinks), 0o644)
}

// splice replaces the generated part of file with generated.
func splice(file, generated string) error {
	doc, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	out, err := docgen.Splice(doc, []byte(generated))
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return os.WriteFile(file, out, 0o644)
}
