package reliability

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// binary is the syncd executable built once for the whole package.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "syncd-reliability-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "make build folder:", err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "syncd")
	build := exec.Command("go", "build", "-o", binary, "github.com/syncd/syncd/cmd/syncd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build syncd:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	pgtest.Main(m, func() {
		if cluster != nil {
			cluster.Destroy(context.Background())
		}
		os.RemoveAll(dir)
	})
}

// soak reports whether the long variants were asked for (make soak).
func soak() bool { return os.Getenv("SYNCD_SOAK") != "" }
