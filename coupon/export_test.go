package coupon

import "context"

// Hooks for the external tests (package coupon_test), compiled into test
// builds only.

// MutationBuild is true when the tests run in a -tags mutation build.
const MutationBuild = mutationBuild

// SetBeforeCommit makes every page transaction run f just before its commit
// (nil removes it).
func SetBeforeCommit(f func(ctx context.Context) error) { beforeCommit = f }
