package coupon_test

import (
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testbin"
	"github.com/syncd/syncd/internal/testutil"
)

// bin is the real binary, built once for the package's subprocess tests
// from the same source tree as the test binary (a mutated copy in
// scripts/mutations.sh, so that the subprocess breaks the same safeguard).
var bin testutil.Binary

func TestMain(m *testing.M) {
	path, cleanup := testbin.Build()
	bin = testutil.Binary{Path: path}
	pgtest.Main(m, cleanup)
}
