package cli

import (
	"github.com/syncd/syncd/coupon"
	"github.com/syncd/syncd/kind"
)

// DefaultKinds are the kinds of sink syncd is built with, one line a kind:
// the one place a kind is registered (docs/SINKS.md). Run uses them
// unless Env.Kinds says otherwise, and hands them to the run loop, the
// daemon and the operations.
func DefaultKinds() *kind.Registry {
	return kind.NewRegistry(
		kind.Postgres(),
		coupon.Kind(),
	)
}
