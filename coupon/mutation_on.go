//go:build mutation

package coupon

import "os"

// mutation is read from SYNCD_MUTATION in a build made with -tags mutation
// only (scripts/mutations.sh); see docs/COUPONS-MUTATIONS.md.
var mutation = os.Getenv("SYNCD_MUTATION")

// mutationBuild is true in a test build made with -tags mutation.
const mutationBuild = true
