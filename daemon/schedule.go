package daemon

import (
	"fmt"
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
// never).
type entry struct {
	sched cron.Schedule
	job   func()
	next  time.Time
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
	sched, err := config.ScheduleParser().Parse(spec)
	if err != nil {
		return 0, fmt.Errorf("schedule %q: %w", spec, err)
	}
	s.mu.Lock()
	s.last++
	id := s.last
	s.entries[id] = &entry{sched: sched, job: job, next: sched.Next(s.clock.Now().In(s.loc))}
	s.mu.Unlock()
	s.poke()
	return id, nil
}

// remove unschedules an entry; a job it started goes on.
func (s *scheduler) remove(id entryID) {
	s.mu.Lock()
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
	var next time.Time
	for _, e := range s.entries {
		if !e.next.IsZero() && !e.next.After(now) {
			jobs = append(jobs, e.job)
			e.next = e.sched.Next(now)
		}
		if !e.next.IsZero() && (next.IsZero() || e.next.Before(next)) {
			next = e.next
		}
	}
	return jobs, next
}
