package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testbin"
)

// DefaultTimeout bounds a Binary's Run when its Timeout is zero.
const DefaultTimeout = 5 * time.Minute

// Binary is an executable the tests run (the syncd built for them), with
// what every run of it shares.
type Binary struct {
	Path string
	// Env is the environment every run starts from; nil means the test
	// process's own. A run's env arguments are added to it.
	Env []string
	// Timeout bounds Run (DefaultTimeout when zero): a run still going
	// then is killed and fails the test with its output so far.
	Timeout time.Duration
	// Forbid lists strings (passwords, tokens) that must never appear in
	// the output: a run or process that prints one fails the test.
	Forbid []string
	// ShowOutput logs the output of a process from Start when the test
	// fails, for tests whose failure messages do not carry it.
	ShowOutput bool
}

// Result is what one finished process did.
type Result struct {
	Code   int // the exit code; -1 when a signal ended the process
	Signal syscall.Signal
	Stdout string
	Stderr string
}

// String shows the exit code and both outputs, for failure messages.
func (r Result) String() string {
	return r.head() + "\nstdout:\n" + r.Stdout + "\nstderr:\n" + r.Stderr
}

// Run runs the binary with args to its end and returns its exit code and
// output; env (KEY=VALUE) is added to b.Env. It fails the test when the
// binary cannot start or outlives b.Timeout.
func (b Binary) Run(t testing.TB, env []string, args ...string) Result {
	t.Helper()
	p := b.Start(t, env, args...)
	p.show = false // the caller has the output in the Result
	return p.Wait(t, cmpDuration(b.Timeout, DefaultTimeout))
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Process is a running binary started by Start. Its output is read while
// it runs through Stdout, Stderr and Output (both, line by line in the
// order they came).
type Process struct {
	Stdout, Stderr, Output *Log

	path   string
	args   []string
	cmd    *exec.Cmd
	forbid []string
	show   bool // log the output when the test fails
	outs   [2]*lineWriter
	done   chan struct{}
	err    error // of cmd.Wait, set before done is closed
	once   sync.Once
	res    Result
	keys   sync.Once // checkRepeatedKeys, when the result is read or at the end
}

// Start starts the binary with args and env added to b.Env. The process
// is killed when the test ends if it is still running.
func (b Binary) Start(t testing.TB, env []string, args ...string) *Process {
	t.Helper()
	p := &Process{Stdout: &Log{}, Stderr: &Log{}, Output: &Log{}, path: b.Path, args: args, forbid: b.Forbid, show: b.ShowOutput, done: make(chan struct{})}
	p.cmd = exec.Command(b.Path, args...)
	base := b.Env
	if base == nil {
		base = os.Environ()
	}
	p.cmd.Env = append(append([]string(nil), base...), env...)
	p.outs = [2]*lineWriter{{own: p.Stdout, both: p.Output}, {own: p.Stderr, both: p.Output}}
	p.cmd.Stdout, p.cmd.Stderr = p.outs[0], p.outs[1]
	p.cmd.WaitDelay = 10 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.name(), err)
	}
	go func() {
		p.err = p.cmd.Wait() // returns once the output is copied
		for _, w := range p.outs {
			w.flush()
		}
		p.Stdout.Close()
		p.Stderr.Close()
		p.Output.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		p.checkForbidden(t)
		p.keys.Do(func() { p.checkRepeatedKeys(t) })
		if p.show && t.Failed() {
			t.Logf("output of %s:\n%s", p.name(), p.Output)
		}
	})
	return p
}

func (p *Process) name() string {
	return strings.Join(append([]string{filepath.Base(p.path)}, p.args...), " ")
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited and its output is read.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig; a process that has already exited is not an error.
func (p *Process) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("send %v to %s: %v", sig, p.name(), err)
	}
}

// Wait waits up to timeout for the process to exit and returns what it
// did. When timeout passes, the process is killed and the test fails.
func (p *Process) Wait(t testing.TB, timeout time.Duration) Result {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%s did not exit within %s; output:\n%s", p.name(), timeout, p.Output)
	}
	return p.result(t)
}

// Stop sends SIGTERM and waits up to timeout for the process to exit.
func (p *Process) Stop(t testing.TB, timeout time.Duration) Result {
	t.Helper()
	p.Signal(t, syscall.SIGTERM)
	return p.Wait(t, timeout)
}

// Kill sends SIGKILL and waits for the process to go.
func (p *Process) Kill(t testing.TB) Result {
	t.Helper()
	p.Signal(t, syscall.SIGKILL)
	return p.Wait(t, time.Minute)
}

// Alive fails the test if the process has exited.
func (p *Process) Alive(t testing.TB) {
	t.Helper()
	if p.Exited() {
		t.Fatalf("%s exited (%s) while the test needed it running; output:\n%s", p.name(), p.result(t).head(), p.Output)
	}
}

// WaitLog waits up to timeout for a record in the output with message msg
// and the attributes (key, value pairs; see Log.Find) and returns it. It
// fails the test at the timeout or as soon as the process exits without
// having written one.
func (p *Process) WaitLog(t testing.TB, timeout time.Duration, msg string, attrs ...any) Entry {
	t.Helper()
	e, ok := p.Output.AwaitEntry(timeout, msg, attrs...)
	if !ok {
		t.Fatalf("no log record %q %v from %s within %s (exited: %v); output:\n%s", msg, attrs, p.name(), timeout, p.Exited(), p.Output)
	}
	return e
}

// WaitLogCount waits up to timeout for n records with message msg and
// the attributes, failing like WaitLog.
func (p *Process) WaitLogCount(t testing.TB, timeout time.Duration, n int, msg string, attrs ...any) {
	t.Helper()
	if !p.Output.AwaitCount(timeout, n, msg, attrs...) {
		t.Fatalf("%d of %d log records %q %v from %s within %s (exited: %v); output:\n%s", p.Output.Count(msg, attrs...), n, msg, attrs, p.name(), timeout, p.Exited(), p.Output)
	}
}

// Eventually polls cond like the package's Eventually, and fails at once
// if the process exits meanwhile.
func (p *Process) Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	met, exited := false, false
	poll(timeout, func() bool {
		if cond() {
			met = true
			return true
		}
		exited = p.Exited()
		return exited
	})
	switch {
	case met:
	case exited:
		t.Fatalf("%s exited (%s) before %s; output:\n%s", p.name(), p.result(t).head(), what, p.Output)
	default:
		t.Fatalf("%s did not happen within %s; output of %s:\n%s", what, timeout, p.name(), p.Output)
	}
}

// result turns the exit status into a Result, once the process is done.
func (p *Process) result(t testing.TB) Result {
	t.Helper()
	p.once.Do(func() {
		p.res = Result{Stdout: p.Stdout.String(), Stderr: p.Stderr.String()}
		var ee *exec.ExitError
		switch {
		case p.err == nil:
		case errors.As(p.err, &ee):
			p.res.Code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.res.Signal = ws.Signal()
			}
		default:
			p.res.Code = -1
			p.res.Stderr += fmt.Sprintf("\n[testutil: wait: %v]", p.err)
		}
	})
	p.checkForbidden(t)
	p.keys.Do(func() { p.checkRepeatedKeys(t) })
	return p.res
}

func (r Result) head() string {
	if r.Signal != 0 {
		return "signal " + r.Signal.String()
	}
	return "exit " + strconv.Itoa(r.Code)
}

// checkForbidden fails t when the output holds a forbidden string.
func (p *Process) checkForbidden(t testing.TB) {
	t.Helper()
	out := p.Output.String()
	for _, s := range p.forbid {
		if s != "" && strings.Contains(out, s) {
			t.Errorf("%s printed %q, which must never appear in its output", p.name(), s)
		}
	}
}

// checkRepeatedKeys fails t when a log record of the process gives a key
// twice (said once per message).
func (p *Process) checkRepeatedKeys(t testing.TB) {
	t.Helper()
	said := map[string]bool{}
	for _, e := range p.Output.Entries() {
		if len(e.Repeated) > 0 && !said[e.Msg()] {
			said[e.Msg()] = true
			t.Errorf("%s logged %q with the key(s) %s more than once: %s", p.name(), e.Msg(), strings.Join(e.Repeated, ", "), e.Line)
		}
	}
}

// lineWriter copies one stream to its own log as it comes, and to the
// combined log a whole line at a time, so that lines of stdout and
// stderr never mix.
type lineWriter struct {
	own, both *Log
	partial   []byte
}

func (w *lineWriter) Write(b []byte) (int, error) {
	_, _ = w.own.Write(b)
	w.partial = append(w.partial, b...)
	if i := lastNewline(w.partial); i >= 0 {
		_, _ = w.both.Write(w.partial[:i+1])
		w.partial = append(w.partial[:0], w.partial[i+1:]...)
	}
	return len(b), nil
}

func (w *lineWriter) flush() {
	if len(w.partial) > 0 {
		_, _ = w.both.Write(w.partial)
		w.partial = nil
	}
}

func lastNewline(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			return i
		}
	}
	return -1
}

// Builder builds the syncd binary the first time a test asks for it, for
// packages where only some tests need it. Call Cleanup from TestMain.
type Builder struct {
	once    sync.Once
	path    string
	cleanup func()
	err     error
}

// Path builds the binary if it is not built yet and returns its path; a
// failed build fails the test.
func (b *Builder) Path(t testing.TB) string {
	t.Helper()
	b.once.Do(func() { b.path, b.cleanup, b.err = testbin.BuildE() })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Cleanup removes the binary, if it was built.
func (b *Builder) Cleanup() {
	if b.cleanup != nil {
		b.cleanup()
	}
}
