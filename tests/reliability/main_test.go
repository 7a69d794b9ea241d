package reliability

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testbin"
	"github.com/syncd/syncd/internal/testutil"
)

// binary is the syncd executable built once for the whole package; bin
// runs it in a clean environment (baseEnv), each run within 2 minutes.
var (
	binary string
	bin    testutil.Binary
)

func TestMain(m *testing.M) {
	var cleanup func()
	binary, cleanup = testbin.Build()
	bin = testutil.Binary{Path: binary, Env: baseEnv(), Timeout: 2 * time.Minute}
	pgtest.Main(m, func() {
		if cluster != nil {
			cluster.Destroy(context.Background())
		}
		cleanup()
	})
}

// soak reports whether the long variants were asked for (make soak).
func soak() bool { return os.Getenv("SYNCD_SOAK") != "" }
