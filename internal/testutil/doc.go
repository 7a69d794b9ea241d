// Package testutil is the one set of helpers syncd's tests share: run the
// real binary and read its exit code and output (Binary, Process), capture
// a log safely while it is written and find lines in it as parsed slog
// records (Log, Entry), compare a table with its copy row by row (Diff),
// poll for a state instead of sleeping (Eventually), read a daemon's
// /metrics with Prometheus's own parser (Scrape, Metrics), and pick a free
// loopback address (FreeAddr).
//
// Only _test.go files import it: it imports package testing, and
// TestNotInProductionBinary checks that cmd/syncd does not depend on it.
package testutil
