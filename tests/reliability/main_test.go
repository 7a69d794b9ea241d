package reliability

import (
	"context"
	"os"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testbin"
)

// binary is the syncd executable built once for the whole package.
var binary string

func TestMain(m *testing.M) {
	var cleanup func()
	binary, cleanup = testbin.Build()
	pgtest.Main(m, func() {
		if cluster != nil {
			cluster.Destroy(context.Background())
		}
		cleanup()
	})
}

// soak reports whether the long variants were asked for (make soak).
func soak() bool { return os.Getenv("SYNCD_SOAK") != "" }
