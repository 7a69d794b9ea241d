package coupon_test

import (
	"testing"

	"github.com/syncd/syncd/coupon"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testbin"
)

// syncdBin is the real binary, built once for the package's subprocess
// tests (with -tags mutation in a mutation build, so that the subprocess
// breaks the same safeguard as the test binary).
var syncdBin string

func TestMain(m *testing.M) {
	var tags []string
	if coupon.MutationBuild {
		tags = append(tags, "mutation")
	}
	var cleanup func()
	syncdBin, cleanup = testbin.Build(tags...)
	pgtest.Main(m, cleanup)
}
