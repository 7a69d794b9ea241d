// Package reliability is syncd's crash, fault, bad-input and security suite.
// Its tests drive the real syncd binary as a subprocess against a real
// PostgreSQL: they kill it with SIGKILL mid-run, terminate its connections,
// restart its servers, fill or freeze the disk under its state file and feed
// it bad configs, then check what a user cares about: the copy equals the
// source value by value, the watermark never moved back or past an applied
// page, and every failure is one clear line with the right exit code.
//
// The default suite stays within a few minutes; SYNCD_SOAK=1 (make soak)
// runs the long variants. docs/RELIABILITY.md reports what it measured.
package reliability
