package syncer_test

import (
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
