// Package sinktest is the conformance suite every sink.Sink runs: pages are
// applied exactly once in effect however often they are re-applied, a stale
// page never overwrites a newer one, a failed page leaves nothing behind, and
// a reopened sink carries on where the last one stopped. A sink that
// appends rather than upserts (Capabilities.Appends) is held to the rule
// its readers use instead: every row of every page is kept, and the newest
// row of a key by its cursor is the one that counts. A sink has exactly
// the optional capabilities its harness declares (sink.Deferred,
// sink.BinaryWriter, sink.LockHolder, sink.Recorder,
// sink.SchemaFollower), and each one it has keeps its contract; given its
// kind (Harness.Kind), the suite also checks what the kind declares: its
// identity, its secrets, its run lock, schema following, appending and
// the refusal of reconcile where it does not apply.
package sinktest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/runlock"
	"github.com/syncd/syncd/sink"
)

// Harness adapts one sink implementation to the suite. Keys are integers;
// a version stands for the values (and cursor) a row has at one moment, a
// higher version being newer.
type Harness struct {
	// Columns are the source columns the sink is prepared with.
	Columns []page.Column
	// Open returns a new sink on the harness's destination (the same one on
	// every call), not yet prepared.
	Open func(t *testing.T) sink.Sink
	// Page builds a page holding keys at version, in cursor order.
	Page func(keys []int64, version int) page.Page
	// Contents returns what the destination holds, one canonical line per
	// row, sorted. For a sink that appends (Has.Appends) it is what a
	// reader makes of it: the newest row of each key by its cursor.
	Contents func(t *testing.T) []string
	// Stored counts every row the destination holds, each appended row
	// once (needed when Has.Appends).
	Stored func(t *testing.T) int
	// Expect returns the lines Contents must return when the destination
	// has applied each key at the given version.
	Expect func(state map[int64]int) []string
	// Has declares the sink's optional capabilities; the suite fails when
	// the sink has one it does not declare or lacks one it does.
	Has Capabilities
	// BinaryPage builds the page Page builds with binary values
	// (page.Page.Binary); needed when Has.Binary.
	BinaryPage func(keys []int64, version int) page.Page
	// Register makes the destination's record of its position ready and
	// returns the name Record takes; Recorded reads the position the
	// record holds (nil: none). Needed when Has.Recorder.
	Register func(t *testing.T) string
	Recorded func(t *testing.T) []string

	// Kind, when set, is the kind the sink is registered as; the suite
	// then checks the capabilities the kind declares against the sink.
	// Config returns a config of the kind for the harness's destination,
	// Moved one for another destination of the same kind (another
	// database, directory or topic), both with sink.table the same.
	Kind   *kind.Kind
	Config func(t *testing.T) *config.Config
	Moved  func(t *testing.T) *config.Config
}

// Capabilities are the optional interfaces of the sink contract (see
// package sink).
type Capabilities struct {
	// Deferred: sink.Deferred, a commit may become durable after Apply.
	Deferred bool
	// Binary: sink.BinaryWriter whose WantsBinary is true once prepared
	// with Harness.Columns.
	Binary bool
	// LockHolder: sink.LockHolder, the sink's own session holds the run lock.
	LockHolder bool
	// Recorder: sink.Recorder, a page's mark moves the destination's own
	// record of its position in the page's transaction.
	Recorder bool
	// SchemaFollower: sink.SchemaFollower, the copy follows the source's
	// schema changes.
	SchemaFollower bool
	// Appends: Apply appends every row of a page instead of upserting it
	// by key (no interface says so; the kind declares it, Kind.Appends).
	Appends bool
}

func keys(from, to int64) []int64 {
	var out []int64
	for k := from; k <= to; k++ {
		out = append(out, k)
	}
	return out
}

func set(state map[int64]int, ks []int64, version int) {
	for _, k := range ks {
		if state[k] < version {
			state[k] = version
		}
	}
}

// Exercise runs the suite against one implementation. newHarness is called
// once per subtest and must give it a fresh, empty destination.
func Exercise(t *testing.T, newHarness func(t *testing.T) Harness) {
	ctx := context.Background()
	var h Harness
	run := func(name string, fn func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			h = newHarness(t)
			fn(t)
		})
	}
	check := func(t *testing.T, state map[int64]int) {
		t.Helper()
		got, want := h.Contents(t), h.Expect(state)
		if !slices.Equal(got, want) {
			t.Fatalf("destination differs from what was applied:\n got  %d rows %v\n want %d rows %v", len(got), head(got), len(want), head(want))
		}
	}
	open := func(t *testing.T) sink.Sink {
		t.Helper()
		s := h.Open(t)
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		if err := s.Prepare(ctx, h.Columns); err != nil {
			t.Fatalf("prepare: %v", err)
		}
		return s
	}

	run("ApplyAndReapply", func(t *testing.T) {
		s := open(t)
		state := map[int64]int{}
		p := h.Page(keys(1, 100), 1)
		r, err := s.Apply(ctx, p)
		if err != nil {
			t.Fatalf("apply: %v", err)
		}
		if r.Written != 100 {
			t.Errorf("first apply wrote %d rows, want 100", r.Written)
		}
		set(state, keys(1, 100), 1)
		check(t, state)
		r, err = s.Apply(ctx, p)
		if err != nil {
			t.Fatalf("re-apply: %v", err)
		}
		// An upsert changes nothing; an appending sink writes the page again.
		if want := rewritten(h.Has, 100); r.Written != want {
			t.Errorf("re-applying the same page wrote %d rows, want %d", r.Written, want)
		}
		check(t, state)
		if h.Has.Appends {
			if n := h.Stored(t); n != 200 {
				t.Errorf("after a page of 100 rows applied twice the destination holds %d rows; an appending sink keeps all 200", n)
			}
		}
	})

	run("OverlapAndStale", func(t *testing.T) {
		s := open(t)
		state := map[int64]int{}
		for _, step := range []struct {
			from, to int64
			version  int
		}{{1, 50, 1}, {40, 80, 2}, {30, 60, 1}, {75, 90, 3}, {1, 90, 2}} {
			if _, err := s.Apply(ctx, h.Page(keys(step.from, step.to), step.version)); err != nil {
				t.Fatalf("apply %d..%d v%d: %v", step.from, step.to, step.version, err)
			}
			set(state, keys(step.from, step.to), step.version)
			check(t, state)
		}
	})

	run("EmptyPage", func(t *testing.T) {
		s := open(t)
		r, err := s.Apply(ctx, page.Page{})
		if err != nil || r.Written != 0 {
			t.Fatalf("empty page: written %d, err %v; want 0, nil", r.Written, err)
		}
		check(t, map[int64]int{})
	})

	run("CancelledApplyLeavesNothing", func(t *testing.T) {
		s := open(t)
		state := map[int64]int{}
		if _, err := s.Apply(ctx, h.Page(keys(1, 10), 1)); err != nil {
			t.Fatal(err)
		}
		set(state, keys(1, 10), 1)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.Apply(cctx, h.Page(keys(5, 500), 2)); err == nil {
			t.Fatal("apply with a cancelled context succeeded; want an error")
		}
		check(t, state)
		// The sink must still work after a failed page (a new one if the
		// connection was lost, as a retrying run would make).
		s2 := open(t)
		if _, err := s2.Apply(ctx, h.Page(keys(5, 500), 2)); err != nil {
			t.Fatalf("apply after a failed page: %v", err)
		}
		set(state, keys(5, 500), 2)
		check(t, state)
	})

	run("Capabilities", func(t *testing.T) {
		s := open(t)
		_, deferred := s.(sink.Deferred)
		_, holder := s.(sink.LockHolder)
		_, recorder := s.(sink.Recorder)
		_, follower := s.(sink.SchemaFollower)
		b, binary := s.(sink.BinaryWriter)
		binary = binary && b.WantsBinary()
		got := Capabilities{Deferred: deferred, Binary: binary, LockHolder: holder, Recorder: recorder, SchemaFollower: follower, Appends: h.Has.Appends}
		if got != h.Has {
			t.Fatalf("the sink's capabilities are %+v; its harness declares %+v", got, h.Has)
		}
	})

	// Which capability tests run is what the harness declares.
	has := newHarness(t).Has
	if has.Recorder {
		run("RecorderMovesWithThePage", func(t *testing.T) {
			s := open(t)
			s.(sink.Recorder).Record(h.Register(t))
			p := h.Page(keys(1, 10), 1)
			p.Mark = p.Last
			if _, err := s.Apply(ctx, p); err != nil {
				t.Fatal(err)
			}
			if got := h.Recorded(t); !slices.Equal(got, p.Mark) {
				t.Fatalf("after a page with mark %v the record holds %v", p.Mark, got)
			}
			// A page without a mark (a re-read behind the watermark) and a
			// page that fails leave the record where it was.
			if _, err := s.Apply(ctx, h.Page(keys(1, 5), 1)); err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			failed := h.Page(keys(11, 20), 2)
			failed.Mark = failed.Last
			if _, err := s.Apply(cctx, failed); err == nil {
				t.Fatal("apply with a cancelled context succeeded; want an error")
			}
			if got := h.Recorded(t); !slices.Equal(got, p.Mark) {
				t.Fatalf("after an unmarked and a failed page the record holds %v, want %v", got, p.Mark)
			}
		})
	}
	if has.Deferred {
		run("DeferredDurableAfterFlush", func(t *testing.T) {
			s := open(t)
			d := s.(sink.Deferred)
			state := map[int64]int{}
			const pages = 30
			var last int64
			for i := range int64(pages) {
				ks := keys(i*10+1, i*10+10)
				if _, err := s.Apply(ctx, h.Page(ks, 1)); err != nil {
					t.Fatalf("apply page %d: %v", i+1, err)
				}
				set(state, ks, 1)
				n := d.Durable()
				if n < last || n > i+1 {
					t.Fatalf("after %d pages Durable() = %d (was %d); want a count that never goes back and never passes the pages applied", i+1, n, last)
				}
				last = n
			}
			fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := d.Flush(fctx); err != nil {
				t.Fatalf("flush: %v", err)
			}
			if n := d.Durable(); n != pages {
				t.Fatalf("after Flush Durable() = %d; want every page applied (%d)", n, pages)
			}
			check(t, state)
		})
	}
	if has.Binary {
		run("BinaryPages", func(t *testing.T) {
			s := open(t)
			state := map[int64]int{}
			steps := []struct {
				from, to int64
				version  int
				binary   bool
			}{{1, 50, 1, true}, {20, 70, 2, false}, {60, 80, 3, true}, {1, 40, 1, true}, {60, 80, 3, true}}
			for _, st := range steps {
				p := h.Page(keys(st.from, st.to), st.version)
				if st.binary {
					p = h.BinaryPage(keys(st.from, st.to), st.version)
					if !p.Binary {
						t.Fatal("Harness.BinaryPage built a page without Binary set")
					}
				}
				if _, err := s.Apply(ctx, p); err != nil {
					t.Fatalf("apply %d..%d v%d (binary %v): %v", st.from, st.to, st.version, st.binary, err)
				}
				set(state, keys(st.from, st.to), st.version)
				check(t, state)
			}
			r, err := s.Apply(ctx, h.BinaryPage(keys(60, 80), 3))
			if want := rewritten(h.Has, 21); err != nil || r.Written != want {
				t.Fatalf("re-applying a binary page: written %d, err %v; want %d, nil", r.Written, err, want)
			}
		})
	}
	if has.LockHolder {
		run("LockHolderSession", func(t *testing.T) {
			s := open(t)
			conn := s.(sink.LockHolder).Conn()
			if conn == nil {
				t.Fatal("Conn() is nil")
			}
			var pid, held int64
			if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(7011)"); err != nil {
				t.Fatalf("take a session lock on the sink's connection: %v", err)
			}
			if _, err := s.Apply(ctx, h.Page(keys(1, 20), 1)); err != nil {
				t.Fatal(err)
			}
			// The lock held on Conn is held by the session Apply wrote on.
			c2 := s.(sink.LockHolder).Conn()
			if err := c2.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 7011 AND granted AND pid = pg_backend_pid() AND pid = $1", pid).Scan(&held); err != nil || held != 1 {
				t.Fatalf("after Apply the lock taken on Conn is held %d times by the same session (%v); want 1", held, err)
			}
			state := map[int64]int{}
			set(state, keys(1, 20), 1)
			check(t, state)
			_ = s.Close(ctx)
			if !conn.IsClosed() {
				t.Fatal("Close left Conn open: the run lock would outlive the sink")
			}
		})
	}

	if has.Appends {
		run("AppendsEveryRow", func(t *testing.T) {
			s := open(t)
			state := map[int64]int{}
			applied := 0
			// The lookback window read again, then a newer version, then a
			// stale page: every row is kept, the newest by cursor counts.
			for _, st := range []struct {
				from, to int64
				version  int
			}{{1, 30, 1}, {20, 30, 1}, {10, 25, 2}, {1, 15, 1}} {
				r, err := s.Apply(ctx, h.Page(keys(st.from, st.to), st.version))
				if err != nil {
					t.Fatal(err)
				}
				n := int(st.to - st.from + 1)
				if r.Written != int64(n) {
					t.Fatalf("appending %d rows wrote %d", n, r.Written)
				}
				applied += n
				set(state, keys(st.from, st.to), st.version)
				check(t, state)
			}
			if n := h.Stored(t); n != applied {
				t.Fatalf("the destination holds %d rows; %d were appended", n, applied)
			}
		})
	}
	if has.SchemaFollower {
		run("SchemaFollowerColumns", func(t *testing.T) {
			s := open(t)
			cols, err := s.(sink.SchemaFollower).Columns(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range h.Columns {
				if _, ok := cols[c.Name]; !ok {
					t.Fatalf("after Prepare the copy's columns %v lack %q", slices.Sorted(maps.Keys(cols)), c.Name)
				}
			}
		})
	}
	if k := newHarness(t).Kind; k != nil {
		exerciseKind(t, *k, newHarness)
	}

	run("ReopenContinues", func(t *testing.T) {
		state := map[int64]int{}
		s1 := open(t)
		if _, err := s1.Apply(ctx, h.Page(keys(1, 30), 1)); err != nil {
			t.Fatal(err)
		}
		set(state, keys(1, 30), 1)
		_ = s1.Close(ctx)
		s2 := open(t)
		if _, err := s2.Apply(ctx, h.Page(keys(20, 40), 2)); err != nil {
			t.Fatal(err)
		}
		set(state, keys(20, 40), 2)
		check(t, state)
	})
}

// rewritten is how many rows re-applying a page of n rows writes: none
// for an upsert, all of them for a sink that appends.
func rewritten(has Capabilities, n int64) int64 {
	if has.Appends {
		return n
	}
	return 0
}

// exerciseKind checks what kind k declares against the harness's sink.
func exerciseKind(t *testing.T, k kind.Kind, newHarness func(t *testing.T) Harness) {
	ctx := context.Background()
	t.Run("KindDeclares", func(t *testing.T) {
		h := newHarness(t)
		if k.OpenSink == nil {
			t.Fatal("Kind.OpenSink is nil: the suite checks a table copy's kind")
		}
		s := h.Open(t)
		defer s.Close(ctx)
		if err := s.Prepare(ctx, h.Columns); err != nil {
			t.Fatal(err)
		}
		_, follower := s.(sink.SchemaFollower)
		if k.FollowsSchema != follower || k.FollowsSchema != h.Has.SchemaFollower {
			t.Errorf("Kind.FollowsSchema is %v, the sink is a sink.SchemaFollower: %v, the harness declares %v", k.FollowsSchema, follower, h.Has.SchemaFollower)
		}
		if k.Appends != h.Has.Appends {
			t.Errorf("Kind.Appends is %v; the harness declares %v", k.Appends, h.Has.Appends)
		}
		if k.Reconcile == nil {
			err := k.NoReconcile(h.Config(t))
			if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), k.Type) {
				t.Errorf("the refusal of reconcile is %v; want a config error naming sink type %s", err, k.Type)
			}
		}
	})
	t.Run("KindIdentity", func(t *testing.T) {
		h := newHarness(t)
		c, moved := h.Config(t), h.Moved(t)
		id := k.Identity(c)
		if len(id) == 0 {
			t.Fatal("Kind.Identity is empty: a copy moved elsewhere would resume from the old watermark")
		}
		if again := k.Identity(c); !maps.Equal(id, again) {
			t.Fatalf("Kind.Identity differs between two calls: %v, %v", id, again)
		}
		if other := k.Identity(moved); maps.Equal(id, other) {
			t.Fatalf("Kind.Identity of another destination is the same (%v): a moved copy would resume from the old watermark", id)
		}
		if k.Secrets == nil {
			return
		}
		for _, secret := range k.Secrets(c) {
			for key, v := range id {
				if secret != "" && strings.Contains(v, secret) {
					t.Errorf("identity %s holds a secret of the kind; identities are printed", key)
				}
			}
		}
	})
	if k.Lock == nil {
		return
	}
	t.Run("KindLock", func(t *testing.T) {
		h := newHarness(t)
		c := h.Config(t)
		target := runlock.Target{Source: c.Name, Writes: c.Sink.Ident.String(), Identity: "conformance"}
		s1, s2 := h.Open(t), h.Open(t)
		defer s1.Close(ctx)
		defer s2.Close(ctx)
		l1, err := k.Lock(ctx, c, s1, target)
		if err != nil {
			t.Fatalf("take the run lock: %v", err)
		}
		if err := l1.Check(ctx); err != nil {
			t.Fatalf("check a held lock: %v", err)
		}
		if l2, err := k.Lock(ctx, c, s2, target); !errors.Is(err, runlock.ErrHeld) {
			if l2 != nil {
				_ = l2.Release(ctx)
			}
			t.Fatalf("a second run took the lock another holds: err %v; want runlock.ErrHeld", err)
		}
		if err := l1.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		l3, err := k.Lock(ctx, c, s2, target)
		if err != nil {
			t.Fatalf("take the lock after its release: %v", err)
		}
		_ = l3.Release(ctx)
	})
}

func head(s []string) []string {
	if len(s) > 5 {
		return append(slices.Clone(s[:5]), "...")
	}
	return s
}
