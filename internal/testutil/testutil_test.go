package testutil_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// helperEnv makes the test binary act as a small program for the process
// tests (see helper).
const helperEnv = "TESTUTIL_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	pgtest.Main(m)
}

// helper is the program the process tests run.
func helper(mode string) int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	switch mode {
	case "exit":
		fmt.Fprint(os.Stdout, "to stdout\n")
		log.Info("run done", "rows", 7)
		fmt.Fprint(os.Stderr, "syncd run: it failed\n")
		code, _ := strconv.Atoi(os.Getenv("TESTUTIL_CODE"))
		return code
	case "serve":
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM)
		// Half lines on both streams: the combined output must still
		// hold whole lines only.
		for i := range 50 {
			fmt.Fprintf(os.Stdout, "out %d ", i)
			fmt.Fprintf(os.Stderr, `{"msg":"err`)
			fmt.Fprintf(os.Stdout, "end\n")
			fmt.Fprintf(os.Stderr, `","i":%d}`+"\n", i)
		}
		log.Info("ready", "addr", "127.0.0.1:1")
		<-stop
		log.Info("stopping")
		return 0
	case "secret":
		fmt.Println("dsn postgres://u:hunter2@h/db")
		return 0
	case "repeat":
		log.With("source", "orders").Info("reconcile done", "source", "orders", "missing", 0)
		log.With("source", "orders").Info("reconcile done", "source", "orders", "missing", 1)
		return 0
	case "hang":
		select {}
	}
	return 99
}

func helperBinary(t *testing.T, mode string) testutil.Binary {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return testutil.Binary{Path: exe, Env: []string{helperEnv + "=" + mode, "PATH=" + os.Getenv("PATH")}}
}

// fakeT records a failure instead of failing the real test; Fatal ends
// the goroutine the checked code runs in, as testing does.
type fakeT struct {
	testing.TB
	mu     sync.Mutex
	fatal  string
	errors []string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeT) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }
func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

// fails runs fn with a fakeT and returns the fatal message ("" if none).
func fails(t *testing.T, fn func(tb testing.TB)) *fakeT {
	t.Helper()
	f := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

func TestRunReturnsExitCodeAndBothOutputs(t *testing.T) {
	b := helperBinary(t, "exit")
	r := b.Run(t, []string{"TESTUTIL_CODE=3"})
	if r.Code != 3 || r.Signal != 0 || r.Stdout != "to stdout\n" {
		t.Fatalf("got %s", r)
	}
	es := testutil.ParseLines(r.Stderr)
	if len(es) != 1 || !es[0].Match("run done", "rows", 7) || !strings.HasSuffix(r.Stderr, "syncd run: it failed\n") {
		t.Fatalf("stderr %q parsed as %v", r.Stderr, es)
	}
	if r := b.Run(t, []string{"TESTUTIL_CODE=0"}); r.Code != 0 {
		t.Fatalf("exit 0 reported as %s", r)
	}
}

func TestProcessSignalWaitAndWholeLines(t *testing.T) {
	p := helperBinary(t, "serve").Start(t, nil)
	e := p.WaitLog(t, 30*time.Second, "ready")
	if e.Text("addr") != "127.0.0.1:1" || e.Level() != "INFO" || e.Time().IsZero() {
		t.Fatalf("ready record %+v", e)
	}
	p.Alive(t)
	r := p.Stop(t, 30*time.Second)
	if r.Code != 0 || !p.Exited() {
		t.Fatalf("after SIGTERM: %s", r)
	}
	if p.Output.Count("stopping") != 1 || p.Stderr.Count("err") != 50 {
		t.Fatalf("records: %d stopping, %d err", p.Output.Count("stopping"), p.Stderr.Count("err"))
	}
	outs := 0
	for _, l := range p.Output.Lines() {
		switch {
		case strings.HasPrefix(l, "out "):
			if !strings.HasSuffix(l, " end") {
				t.Fatalf("a stdout line mixed with another: %q", l)
			}
			outs++
		default:
			if _, err := testutil.ParseLine(l); err != nil {
				t.Fatalf("a stderr line mixed with another: %q", l)
			}
		}
	}
	if outs != 50 || len(p.Output.Entries()) != 52 {
		t.Fatalf("combined output: %d stdout lines, %d records:\n%s", outs, len(p.Output.Entries()), p.Output)
	}
}

func TestKilledProcessReportsTheSignal(t *testing.T) {
	p := helperBinary(t, "hang").Start(t, nil)
	r := p.Kill(t)
	if r.Signal != syscall.SIGKILL || r.Code != -1 || !strings.HasPrefix(r.String(), "signal killed\n") {
		t.Fatalf("got %+v (%s)", r, r)
	}
}

func TestWaitFailsAtTimeoutAndKills(t *testing.T) {
	var p *testutil.Process
	f := fails(t, func(tb testing.TB) {
		p = helperBinary(t, "hang").Start(tb, nil)
		p.Wait(tb, 100*time.Millisecond)
	})
	if !strings.Contains(f.fatal, "did not exit within 100ms") || !p.Exited() {
		t.Fatalf("fatal %q, exited %v", f.fatal, p.Exited())
	}
}

func TestWaitLogFailsAsSoonAsTheProcessExits(t *testing.T) {
	start := time.Now()
	f := fails(t, func(tb testing.TB) {
		p := helperBinary(t, "exit").Start(tb, nil)
		p.WaitLog(tb, time.Minute, "never")
	})
	if !strings.Contains(f.fatal, `no log record "never"`) || !strings.Contains(f.fatal, "exited: true") || time.Since(start) > 30*time.Second {
		t.Fatalf("fatal %q after %s", f.fatal, time.Since(start))
	}
	f = fails(t, func(tb testing.TB) {
		p := helperBinary(t, "exit").Start(tb, nil)
		p.Eventually(tb, time.Minute, "the impossible", func() bool { return false })
	})
	if !strings.Contains(f.fatal, "exited (exit 0) before the impossible") {
		t.Fatalf("fatal %q", f.fatal)
	}
}

func TestForbiddenOutputFails(t *testing.T) {
	b := helperBinary(t, "secret")
	b.Forbid = []string{"hunter2"}
	f := fails(t, func(tb testing.TB) { b.Run(tb, nil) })
	if len(f.errors) == 0 || !strings.Contains(f.errors[0], `printed "hunter2"`) {
		t.Fatalf("errors %q", f.errors)
	}
}

// A log record that gives a key twice fails the test that ran the
// process, once per message: a reader of the JSON keeps one of the two.
func TestRepeatedLogKeyFails(t *testing.T) {
	b := helperBinary(t, "repeat")
	f := fails(t, func(tb testing.TB) {
		if r := b.Run(tb, nil); r.Code != 0 {
			tb.Errorf("exit %d", r.Code)
		}
	})
	if len(f.errors) != 1 || !strings.Contains(f.errors[0], `logged "reconcile done" with the key(s) source more than once`) {
		t.Fatalf("errors %q", f.errors)
	}
	for _, line := range []string{
		`{"msg":"a","source":"x","n":{"source":1},"source":"y"}`,
		`time=x level=INFO msg=a source=x source=y`,
	} {
		e, err := testutil.ParseLine(line)
		if err != nil || len(e.Repeated) != 1 || e.Repeated[0] != "source" {
			t.Errorf("%s: repeated %q, %v", line, e.Repeated, err)
		}
	}
	if e, _ := testutil.ParseLine(`{"msg":"a","n":{"source":1},"source":"y"}`); len(e.Repeated) != 0 {
		t.Errorf("a nested key counted as repeated: %q", e.Repeated)
	}
}

// Many goroutines log into one Log while others read it: every record is
// there once, whole, and found by its attributes in any order.
func TestLogConcurrentWritesAndReads(t *testing.T) {
	var l testutil.Log
	const writers, each = 8, 200
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
					_ = l.Count("page applied")
					_ = l.String()
				}
			}
		}()
	}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var log *slog.Logger
			if w%2 == 0 {
				log = slog.New(slog.NewJSONHandler(&l, nil))
			} else {
				log = slog.New(slog.NewTextHandler(&l, nil))
			}
			for i := range each {
				log.Info("page applied", "writer", w, "page", i, "cursor", []string{"2026-01-01 00:00:00+00", strconv.Itoa(i)})
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	if n := l.Count("page applied"); n != writers*each {
		t.Fatalf("%d records, want %d", n, writers*each)
	}
	for w := range writers {
		if n := l.Count("page applied", "writer", w); n != each {
			t.Fatalf("writer %d: %d records, want %d", w, n, each)
		}
	}
	if _, ok := l.Find("page applied", "page", 199, "writer", 2); !ok {
		t.Fatal("no JSON record found by page then writer")
	}
	if _, ok := l.Find("page applied", "writer", 3, "page", 199); !ok {
		t.Fatal("no text record found by writer then page")
	}
	if e, ok := l.FindFunc(func(e testutil.Entry) bool { return strings.HasPrefix(e.Msg(), "page ") && e.Int("page") == 150 }); !ok || e.Msg() != "page applied" {
		t.Fatal("FindFunc found no record of page 150")
	}
	if _, ok := l.Find("page applied", "writer", 2, "page", 200); ok {
		t.Fatal("found a record that was never written")
	}
}

func TestParseLine(t *testing.T) {
	var l testutil.Log
	json := slog.New(slog.NewJSONHandler(&l, nil))
	text := slog.New(slog.NewTextHandler(&l, nil))
	for _, log := range []*slog.Logger{json, text} {
		log.Warn("bound held back", slog.Group("holder", "pid", 42, "app", "psql two"), "ok", true, "took", 1500*time.Millisecond, "cursor", []string{"a", "1"})
	}
	es := l.Entries()
	if len(es) != 2 {
		t.Fatalf("%d records:\n%s", len(es), l.String())
	}
	for i, e := range es {
		if !e.Match("bound held back", "holder.pid", 42, "holder.app", "psql two", "ok", true) || e.Level() != "WARN" || e.Int("holder.pid") != 42 {
			t.Errorf("record %d (%s) does not match: %v", i, e.Line, e.Fields)
		}
	}
	if !es[0].Match("", "cursor", []string{"a", "1"}) || !es[1].Match("", "took", "1.5s") {
		t.Errorf("cursor or duration not matched: %v %v", es[0].Fields, es[1].Fields)
	}
	var rec struct {
		Cursor []string `json:"cursor"`
		Holder struct {
			PID int `json:"pid"`
		} `json:"holder"`
	}
	if err := es[0].Decode(&rec); err != nil || rec.Holder.PID != 42 || len(rec.Cursor) != 2 {
		t.Errorf("decode: %v %+v", err, rec)
	}
	for _, bad := range []string{
		"syncd run: source orders: connect: refused",
		`{"time":"2026-01-01T00:00:00Z","level":"INFO","msg":"page appl`,
		`{"level":"INFO"}`,
		"",
		`time=x level=INFO msg="unterminated`,
	} {
		if e, err := testutil.ParseLine(bad); err == nil {
			t.Errorf("%q parsed as a record: %v", bad, e.Fields)
		}
	}
}

// Await wakes on the write that makes its condition true, not on a timer,
// and gives up once the log is closed.
func TestAwaitWakesOnWrite(t *testing.T) {
	var l testutil.Log
	go func() {
		for i := range 3 {
			fmt.Fprintf(&l, `{"msg":"tick","i":%d}`+"\n", i)
		}
	}()
	start := time.Now()
	if !l.AwaitCount(time.Minute, 3, "tick") || time.Since(start) > 30*time.Second {
		t.Fatal("AwaitCount did not see three ticks")
	}
	for i := range 3 {
		if e, ok := l.Nth(time.Minute, i); !ok || e.Int("i") != int64(i) {
			t.Fatalf("record %d: %v %v", i, ok, e.Fields)
		}
	}
	fmt.Fprint(&l, `{"msg":"last"}`) // no newline: a line only once closed
	if _, ok := l.Find("last"); ok {
		t.Fatal("an unfinished line was read as a record")
	}
	go l.Close()
	if _, ok := l.AwaitEntry(time.Minute, "last"); !ok {
		t.Fatal("the last line was not read after Close")
	}
	if _, ok := l.Nth(time.Minute, 4); ok {
		t.Fatal("a closed log gave a fifth record")
	}
	if l.AwaitCount(time.Minute, 1, "never") {
		t.Fatal("a closed log satisfied a condition that never held")
	}
}

func TestEventually(t *testing.T) {
	n := 0
	testutil.Eventually(t, time.Minute, "the third call", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("cond called %d times", n)
	}
	f := fails(t, func(tb testing.TB) {
		testutil.EventuallyState(tb, 50*time.Millisecond, "the impossible", func() (bool, string) { return false, "still 7 rows" })
	})
	if !strings.Contains(f.fatal, "the impossible did not happen within 50ms; last seen: still 7 rows") {
		t.Fatalf("fatal %q", f.fatal)
	}
}

func TestFreeAddr(t *testing.T) {
	addr := testutil.FreeAddr(t)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	l.Close()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("address %s is not on loopback", addr)
	}
}

func TestDiffTables(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	for _, db := range []*pgtest.DB{src, dst} {
		db.Exec(t, `CREATE TABLE t (id bigint PRIMARY KEY, v text, note text);
INSERT INTO t SELECT g, 'v' || g, 'n' FROM generate_series(1, 100) g;
CREATE TABLE c (a int, b text, v text, PRIMARY KEY (a, b));
INSERT INTO c SELECT g, 'k', 'v' || g FROM generate_series(1, 10) g`)
	}
	if d := testutil.DiffTables(t, src.Pool, "t", dst.Pool, "public.t"); !d.Equal() || d.SourceRows != 100 || d.CopyRows != 100 {
		t.Fatalf("equal tables: %s", d)
	}
	dst.Exec(t, `DELETE FROM t WHERE id IN (3, 40, 77); INSERT INTO t VALUES (1000, 'x', 'n'), (101, 'y', 'n');
UPDATE t SET v = 'changed' WHERE id IN (2, 9, 10, 11, 12, 13, 50); UPDATE t SET note = NULL WHERE id = 60`)
	d := testutil.DiffTables(t, src.Pool, "t", dst.Pool, "t")
	if d.Equal() || d.Missing != 3 || d.Extra != 2 || d.Changed != 8 || d.CopyRows != 99 ||
		fmt.Sprint(d.MissingKeys, d.ExtraKeys, d.ChangedKeys) != "[3 40 77] [101 1000] [2 9 10 11 12]" {
		t.Fatalf("diff: %s", d)
	}
	if !strings.Contains(d.String(), "3 missing [3 40 77], 2 extra [101 1000], 8 changed [2 9 10 11 12]") {
		t.Fatalf("String: %s", d)
	}
	// Only the columns asked for are compared.
	d = testutil.Compare{Columns: []string{"id", "note"}}.Tables(t, src.Pool, "t", dst.Pool, "t")
	if d.Changed != 1 || d.ChangedKeys[0] != "60" {
		t.Fatalf("diff on (id, note): %s", d)
	}
	// A composite key, given or found as the source's primary key.
	dst.Exec(t, `UPDATE c SET v = 'w' WHERE a = 4`)
	for _, c := range []testutil.Compare{{Key: []string{"a", "b"}}, {}} {
		d = c.Tables(t, src.Pool, "c", dst.Pool, "c")
		if d.Changed != 1 || d.ChangedKeys[0] != "(4,k)" {
			t.Fatalf("composite key %v: %s", c.Key, d)
		}
	}
	// A primary key column with a hostile name, in a table with one.
	for _, db := range []*pgtest.DB{src, dst} {
		db.Exec(t, `CREATE SCHEMA "S ""q"""; CREATE TABLE "S ""q"""."T x" ("Id ""pk""; --" bigint PRIMARY KEY, v text);
INSERT INTO "S ""q"""."T x" SELECT g, 'v' FROM generate_series(1, 5) g`)
	}
	dst.Exec(t, `UPDATE "S ""q"""."T x" SET v = 'w' WHERE "Id ""pk""; --" = 5`)
	if d := testutil.DiffTables(t, src.Pool, `"S ""q"""."T x"`, dst.Pool, `"S ""q"""."T x"`); d.Changed != 1 || d.ChangedKeys[0] != "5" {
		t.Fatalf("hostile names: %s", d)
	}
	// A copy not created yet, and duplicate keys in a copy without one.
	if d := testutil.DiffTables(t, src.Pool, "t", dst.Pool, "public.nope"); d.Equal() || !d.NoCopy || d.NoSource {
		t.Fatalf("absent copy: %+v", d)
	}
	dst.Exec(t, `CREATE TABLE dup (id bigint, v text); INSERT INTO dup VALUES (1, 'a'), (1, 'a'), (2, 'b')`)
	src.Exec(t, `CREATE TABLE dup (id bigint, v text); INSERT INTO dup VALUES (1, 'a'), (2, 'b')`)
	if d := testutil.DiffTables(t, src.Pool, "dup", dst.Pool, "dup"); d.Equal() || d.Duplicates != 1 || d.DuplicateKeys[0] != "1" {
		t.Fatalf("duplicate key: %s", d)
	}
	f := fails(t, func(tb testing.TB) { testutil.RequireEqual(tb, src.Pool, "t", dst.Pool, "t") })
	if !strings.Contains(f.fatal, "copy t differs from source t: 100 source rows, 99 copy rows") {
		t.Fatalf("RequireEqual: %q", f.fatal)
	}
}

// The helpers are for tests only: the syncd binary must not link them,
// nor package testing.
func TestNotInProductionBinary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-deps", "github.com/syncd/syncd/cmd/syncd").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch dep {
		case "testing", "github.com/syncd/syncd/internal/testutil", "github.com/syncd/syncd/internal/pgtest", "github.com/syncd/syncd/internal/testbin":
			t.Errorf("cmd/syncd depends on %s", dep)
		}
	}
}
