// Package sinktest is the conformance suite every sink.Sink runs: pages are
// applied exactly once in effect however often they are re-applied, a stale
// page never overwrites a newer one, a failed page leaves nothing behind, and
// a reopened sink carries on where the last one stopped.
package sinktest

import (
	"context"
	"slices"
	"testing"

	"github.com/syncd/syncd/page"
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
	// Contents returns what the destination holds, one canonical line per row, sorted.
	Contents func(t *testing.T) []string
	// Expect returns the lines Contents must return when the destination
	// has applied each key at the given version.
	Expect func(state map[int64]int) []string
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
		if r.Written != 0 {
			t.Errorf("re-applying the same page wrote %d rows, want 0", r.Written)
		}
		check(t, state)
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

func head(s []string) []string {
	if len(s) > 5 {
		return append(slices.Clone(s[:5]), "...")
	}
	return s
}
