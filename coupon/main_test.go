package coupon_test

import (
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testbin"
)

// syncdBin is the real binary, built once for the package's subprocess
// tests from the same source tree as the test binary (a mutated copy in
// scripts/mutations.sh, so that the subprocess breaks the same safeguard).
var syncdBin string

func TestMain(m *testing.M) {
	var cleanup func()
	syncdBin, cleanup = testbin.Build()
	pgtest.Main(m, cleanup)
}
