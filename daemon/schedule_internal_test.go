package daemon

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/syncd/syncd/config"
)

// stepClock is a Clock a test moves to the next time the scheduler waits
// for.
type stepClock struct {
	mu      sync.Mutex
	now     time.Time
	at      time.Time
	ch      chan struct{}
	waiting chan struct{} // receives when the scheduler starts a wait
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) At(t time.Time) (<-chan struct{}, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.ch = t, make(chan struct{})
	select {
	case c.waiting <- struct{}{}:
	default:
	}
	return c.ch, func() {}
}

// step waits for the scheduler's wait and moves the clock to its end.
func (c *stepClock) step(t *testing.T) {
	t.Helper()
	select {
	case <-c.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the scheduler did not wait for a tick")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.at
	close(c.ch)
}

// Each entry fires once per tick of its schedule, by the clock it is
// given; a removed entry no longer fires; stop waits for the jobs going.
func TestSchedulerFiresByItsClock(t *testing.T) {
	clock := &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), waiting: make(chan struct{}, 1)}
	s := newScheduler(clock)
	fired := make(chan string, 10)
	release := make(chan struct{})
	if _, err := s.add("@every 1s", func() { fired <- "a" }); err != nil {
		t.Fatal(err)
	}
	b, err := s.add("@every 1s", func() { fired <- "b"; <-release })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.add("not a schedule", func() {}); err == nil {
		t.Fatal("a bad spec was accepted")
	}
	s.start()
	clock.step(t)
	got := map[string]int{}
	for range 2 {
		got[<-fired]++
	}
	if got["a"] != 1 || got["b"] != 1 || !clock.Now().Equal(time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)) {
		t.Fatalf("first tick at %v fired %v, want a and b once at 00:00:01", clock.Now(), got)
	}
	s.remove(b)
	clock.step(t)
	if f := <-fired; f != "a" {
		t.Fatalf("second tick fired %s, want a", f)
	}
	done := s.stop()
	select {
	case <-done:
		t.Fatal("stop did not wait for b's job in flight")
	default: // b's job is held until release
	}
	close(release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not end after the job did")
	}
	select {
	case f := <-fired:
		t.Fatalf("%s fired after the stop", f)
	default:
	}
}

// A spread schedule fires once per period at a place in the period that
// depends only on its key (the same across restarts), the places of many
// keys cover the period, and a cron spec is moved by less than a minute.
func TestSpreadSchedules(t *testing.T) {
	every, err := config.ScheduleParser().Parse("@every 5s")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seconds := map[int]int{}
	for i := range 300 {
		key := fmt.Sprintf("public_*.t%d\x00sync", i)
		sched := spread(every, key)
		first := sched.Next(start)
		if !first.After(start) || first.Sub(start) > 5*time.Second {
			t.Fatalf("%q: first tick at %v, want within 5s after %v", key, first, start)
		}
		if again := spread(every, key).Next(start); !again.Equal(first) {
			t.Fatalf("%q: %v then %v: the offset is not stable", key, first, again)
		}
		at := first
		for range 3 {
			next := sched.Next(at)
			if next.Sub(at) != 5*time.Second {
				t.Fatalf("%q: tick %v then %v, want 5s apart", key, at, next)
			}
			at = next
		}
		seconds[int(first.Sub(start)/time.Second)]++
	}
	for sec := range 5 {
		if seconds[sec] < 30 {
			t.Errorf("second %d of the period holds %d of 300 first ticks, want them spread: %v", sec, seconds[sec], seconds)
		}
	}
	daily, err := config.ScheduleParser().Parse("0 2 * * *")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		key := fmt.Sprintf("s%d\x00reconcile", i)
		got := spread(daily, key).Next(start)
		want := time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC)
		if got.Before(want) || !got.Before(want.Add(time.Minute)) {
			t.Fatalf("%q: daily 02:00 fires at %v, want within the minute after 02:00", key, got)
		}
		// Just after its own firing, the next is the next day's.
		if next := spread(daily, key).Next(got); next.Sub(got) != 24*time.Hour {
			t.Fatalf("%q: after %v next is %v, want a day later", key, got, next)
		}
	}
}

// A thousand spread entries: walking the scheduler from one earliest
// firing to the next fires each entry once a period, in time order, and
// never one that was removed (the queue keeps the entries by their next
// time instead of scanning them all at each firing).
func TestSchedulerQueueFiresEachEntryOncePerPeriod(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &stepClock{now: start}
	s := newScheduler(clock)
	counts := make([]int, 1000)
	ids := make([]entryID, len(counts))
	for i := range counts {
		id, err := s.addSpread("@every 1m", fmt.Sprintf("t%04d\x00sync", i), func() { counts[i]++ })
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	for i := 0; i < len(ids); i += 10 {
		s.remove(ids[i])
	}
	end := start.Add(4*time.Minute - time.Nanosecond) // the first period, then three
	var last time.Time
	for {
		jobs, next := s.due()
		for _, job := range jobs {
			job()
		}
		if next.IsZero() || next.After(end) {
			break
		}
		if next.Before(last) {
			t.Fatalf("the next firing %s is before the one before it, %s", next, last)
		}
		last = next
		clock.mu.Lock()
		clock.now = next
		clock.mu.Unlock()
	}
	for i, n := range counts {
		want := 3
		if i%10 == 0 {
			want = 0
		}
		if n != want {
			t.Errorf("entry %d fired %d times in three periods, want %d", i, n, want)
		}
	}
}
