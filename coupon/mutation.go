//go:build !mutation

package coupon

// mutation names the safeguard a mutation test build breaks (see
// docs/COUPONS-MUTATIONS.md); an ordinary build breaks none, and the
// compiler drops every branch that tests it.
const mutation = ""

// mutationBuild is true in a test build made with -tags mutation.
const mutationBuild = false
