package coupon_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/syncd/syncd/coupon"
	"github.com/syncd/syncd/internal/pgtest"
)

// syncdBin is the real binary, built once for the package's subprocess
// tests (with -tags mutation in a mutation build, so that the subprocess
// breaks the same safeguard as the test binary).
var syncdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "syncd-coupon-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	syncdBin = filepath.Join(dir, "syncd")
	args := []string{"build", "-o", syncdBin}
	if coupon.MutationBuild {
		args = append(args, "-tags", "mutation")
	}
	cmd := exec.Command("go", append(args, "github.com/syncd/syncd/cmd/syncd")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build syncd for the tests:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	pgtest.Main(m, func() { os.RemoveAll(dir) })
}
