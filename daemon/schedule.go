package daemon

import (
	"container/heap"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/syncd/syncd/config"
)

// Clock is the time the daemon's schedules fire by. Options.Clock nil is
// the real clock; a test passes one it moves by hand.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// At returns a channel that is closed once the clock has reached t, and
	// a function that releases the wait when it is no longer needed.
	At(t time.Time) (<-chan struct{}, func())
}

// realClock is the system clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) At(t time.Time) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	tm := time.AfterFunc(time.Until(t), func() { close(ch) })
	return ch, func() { tm.Stop() }
}

// entryID names one scheduled job.
type entryID int

// entry is a schedule and its job; next is when it fires next (zero:
// never), and index its place in the scheduler's queue (-1: not queued).
type entry struct {
	sched cron.Schedule
	job   func()
	next  time.Time
	index int
}

// queue holds the entries that fire, earliest first (container/heap): a
// firing looks at the entries due, not at every entry, which matters with
// a thousand sources each firing once a period.
type queue []*entry

func (q queue) Len() int           { return len(q) }
func (q queue) Less(i, j int) bool { return q[i].next.Before(q[j].next) }
func (q queue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *queue) Push(x any) {
	e := x.(*entry)
	e.index = len(*q)
	*q = append(*q, e)
}
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	e.index = -1
	return e
}

// scheduler fires each job when its schedule says, by Clock: a tick starts
// the job in its own goroutine, a tick that comes while the loop is busy
// is not lost, and missed ticks are not made up (the next one is computed
// from the time of the firing), as with robfig/cron.
type scheduler struct {
	clock Clock
	loc   *time.Location

	mu      sync.Mutex
	entries map[entryID]*entry
	queue   queue // the entries of entries whose next is not zero
	last    entryID
	started bool

	wake chan struct{} // an entry was added or removed
	quit chan struct{} // closed by stop
	done chan struct{} // closed when the loop and every job it started ended
	jobs sync.WaitGroup
}

func newScheduler(clock Clock) *scheduler {
	if clock == nil {
		clock = realClock{}
	}
	return &scheduler{
		clock:   clock,
		loc:     time.Local,
		entries: map[entryID]*entry{},
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// add schedules job by spec (read by config.ScheduleParser).
func (s *scheduler) add(spec string, job func()) (entryID, error) {
	return s.addSpread(spec, "", job)
}

// addSpread schedules job by spec, moved by a stable offset derived from
// key (see spread); "" moves nothing.
func (s *scheduler) addSpread(spec, key string, job func()) (entryID, error) {
	sched, err := config.ScheduleParser().Parse(spec)
	if err != nil {
		return 0, fmt.Errorf("schedule %q: %w", spec, err)
	}
	if key != "" {
		sched = spread(sched, key)
	}
	if e, ok := sched.(everySchedule); ok {
		// Counted from now, as robfig's @every is: the first firing is at
		// least one period away (a run at start is the daemon's own).
		e.anchor = s.clock.Now()
		sched = e
	}
	s.mu.Lock()
	s.last++
	id := s.last
	e := &entry{sched: sched, job: job, next: sched.Next(s.clock.Now().In(s.loc)), index: -1}
	s.entries[id] = e
	if !e.next.IsZero() {
		heap.Push(&s.queue, e)
	}
	s.mu.Unlock()
	s.poke()
	return id, nil
}

// remove unschedules an entry; a job it started goes on.
func (s *scheduler) remove(id entryID) {
	s.mu.Lock()
	if e, ok := s.entries[id]; ok && e.index >= 0 {
		heap.Remove(&s.queue, e.index)
	}
	delete(s.entries, id)
	s.mu.Unlock()
	s.poke()
}

func (s *scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// start runs the loop that fires the jobs.
func (s *scheduler) start() {
	s.mu.Lock()
	s.started = true
	s.mu.Unlock()
	go s.loop()
}

// stop ends the loop; the channel it returns is closed once every job the
// scheduler started has returned.
func (s *scheduler) stop() <-chan struct{} {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	close(s.quit)
	if !started {
		close(s.done)
	}
	return s.done
}

func (s *scheduler) loop() {
	defer func() {
		s.jobs.Wait()
		close(s.done)
	}()
	for {
		due, next := s.due()
		for _, job := range due {
			s.jobs.Add(1)
			go func() {
				defer s.jobs.Done()
				job()
			}()
		}
		var fire <-chan struct{}
		release := func() {}
		if !next.IsZero() {
			fire, release = s.clock.At(next)
		}
		select {
		case <-fire:
		case <-s.wake:
		case <-s.quit:
			release()
			return
		}
		release()
	}
}

// due takes the jobs whose time has come, moves their entries to their
// next time, and returns the earliest time an entry fires next (zero:
// none).
func (s *scheduler) due() ([]func(), time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now().In(s.loc)
	var jobs []func()
	var fired []*entry
	for len(s.queue) > 0 && !s.queue[0].next.After(now) {
		e := heap.Pop(&s.queue).(*entry)
		jobs = append(jobs, e.job)
		fired = append(fired, e)
	}
	// Queued again once all are taken: each fires once a call, as before.
	for _, e := range fired {
		if e.next = e.sched.Next(now); !e.next.IsZero() {
			heap.Push(&s.queue, e)
		}
	}
	if len(s.queue) == 0 {
		return jobs, time.Time{}
	}
	return jobs, s.queue[0].next
}

// Spreading the ticks. Sources that share a schedule would all fire at the
// same instant (robfig's @every counts from the moment the entry is
// added, cron specs from the wall clock), so hundreds of tables on one
// daemon would open their sessions together. Each entry is moved instead
// by a stable offset, the FNV-1a hash of its key (the source's name and
// job) taken modulo a span:
//
//   - @every D fires at anchor + D + offset and then every D, anchor being
//     when the entry was added (the daemon's start, a reload) and offset
//     hash mod D (to the millisecond): the sources sharing D are spread
//     over the whole period, and, as with robfig's @every, no source fires
//     sooner than one period after it was scheduled (tests and operators
//     rely on an "@every 1h" source not running again within the hour). A
//     zero anchor counts from the Unix epoch;
//   - a cron spec fires at its time plus hash mod min(gap, maxCronJitter),
//     gap being the time between its next two firings: "0 2 * * *" fires
//     between 02:00:00 and 02:00:59.
const maxCronJitter = time.Minute

// offsetOf is key's stable offset in [0, span).
func offsetOf(key string, span time.Duration) time.Duration {
	if span < time.Millisecond {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return time.Duration(h.Sum64()%uint64(span/time.Millisecond)) * time.Millisecond
}

// spread moves sched by key's offset (see above).
func spread(sched cron.Schedule, key string) cron.Schedule {
	if every, ok := sched.(cron.ConstantDelaySchedule); ok {
		return everySchedule{period: every.Delay, offset: offsetOf(key, every.Delay)}
	}
	return &jitterSchedule{inner: sched, key: key}
}

// everySchedule fires every period, offset into the period, from anchor
// (zero: the Unix epoch).
type everySchedule struct {
	period, offset time.Duration
	anchor         time.Time
}

func (e everySchedule) Next(t time.Time) time.Time {
	base := time.Unix(0, 0).Add(e.offset)
	if !e.anchor.IsZero() {
		base = e.anchor.Add(e.period + e.offset)
		if t.Before(base) {
			return base.In(t.Location())
		}
	}
	since := t.Sub(base)
	n := since / e.period
	if since < 0 {
		n-- // truncation toward zero
	}
	return base.Add((n + 1) * e.period).In(t.Location())
}

// jitterSchedule fires at inner's times plus a stable jitter.
type jitterSchedule struct {
	inner cron.Schedule
	key   string
}

func (j *jitterSchedule) Next(t time.Time) time.Time {
	// The inner firing whose jittered time is the first after t: the one
	// before t's next may still be ahead once jittered.
	first := j.inner.Next(t.Add(-maxCronJitter))
	for at := first; !at.IsZero(); at = j.inner.Next(at) {
		if fire := at.Add(j.jitter(at)); fire.After(t) {
			return fire
		}
	}
	return time.Time{}
}

// jitter is the offset of the firing at: key's hash modulo the gap to the
// next firing, at most maxCronJitter.
func (j *jitterSchedule) jitter(at time.Time) time.Duration {
	span := maxCronJitter
	if next := j.inner.Next(at); !next.IsZero() && next.Sub(at) < span {
		span = next.Sub(at)
	}
	return offsetOf(j.key, span)
}
