// Package ops holds the operations on a configured source that both the
// command line (package cli) and the daemon (package daemon) perform: its
// status as read from the state file, a resync that moves its watermark
// back, and a reconcile of its copy against the source. It prints nothing:
// the callers render its results and errors.
package ops
