package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/reconcile"
	"github.com/syncd/syncd/syncer"
)

// TestConcurrentWritesNoFalseReports reconciles while a writer updates and
// inserts source rows and a sync loop copies them, as a daemon would: only
// the one difference injected beforehand may be reported.
func TestConcurrentWritesNoFalseReports(t *testing.T) {
	f := newFixture(t, 3000, "")
	f.dst.Exec(t, `UPDATE public.items_copy SET t = 'wrong' WHERE id = 5`)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var writes, syncs atomic.Int64
	errs := make(chan error, 2)
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); wg.Wait() }) }
	defer stop() // also when an assertion fails
	wg.Add(2)
	go func() { // one writer connection: commits in the order of its now()
		defer wg.Done()
		conn, err := f.src.Pool.Acquire(ctx)
		if err != nil {
			errs <- err
			return
		}
		defer conn.Release()
		for n := 1; ctx.Err() == nil; n++ {
			id := 100 + (n*37)%2900
			_, err := conn.Exec(ctx, `UPDATE public.items SET t = $2, n = n + 1, tz = now(), updated_at = now() WHERE id = $1`, id, fmt.Sprint("write ", n))
			if err == nil && n%3 == 0 {
				_, err = conn.Exec(ctx, `INSERT INTO public.items (id, updated_at, t) VALUES ($1, now(), 'new')`, 100000+n)
			}
			if err != nil {
				if ctx.Err() == nil {
					errs <- err
				}
				return
			}
			writes.Add(1)
		}
	}()
	go func() { // the daemon's sync loop
		defer wg.Done()
		for ctx.Err() == nil {
			_, err := syncer.Run(ctx, syncer.Options{Config: f.cfg, Store: f.store, Logger: quietLogger()})
			if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				errs <- err
				return
			}
			syncs.Add(1)
			time.Sleep(20 * time.Millisecond) // pacing: the daemon's schedule between runs, not a wait for anything
		}
	}()
	var skipped int64
	for i := 0; i < 6; i++ {
		rep := f.reconcile(t, reconcile.Options{LeafRows: 16})
		assertKeys(t, "changed", rep.Keys.Changed, "5")
		assertCounts(t, rep, 0, 0, 1)
		skipped += rep.SkippedUnsynced
	}
	stop()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if writes.Load() < 10 || syncs.Load() < 2 || skipped == 0 {
		t.Fatalf("too little concurrency to prove anything: %d writes, %d syncs, %d rows skipped as unsynced", writes.Load(), syncs.Load(), skipped)
	}
	t.Logf("%d writes, %d syncs, %d rows skipped as unsynced", writes.Load(), syncs.Load(), skipped)

	// Caught up, with the writer stopped: only the injected difference.
	f.sync(t)
	rep := f.reconcile(t, reconcile.Options{Repair: true})
	assertKeys(t, "changed", rep.Keys.Changed, "5")
	if !rep.Clean() {
		t.Fatalf("repair left differences: %+v", rep.After)
	}
	f.assertSameRows(t)
}
