package main

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc's CPU times (100 on Linux).
const clockTicks = 100

// busy records how busy the machine was while one benchmark ran: the load
// average at its start and end, the CPU time of every process from
// /proc/stat (and the hypervisor's stolen time), and how much of it was the
// benchmark's own: this process and its children (syncd, psql, pgcopydb,
// exactly, from getrusage) and the server backends of the benchmark's two
// databases (sampled every 500 ms from /proc/PID/stat, by the database
// name in the backend's process title). The rest is the other processes':
// other sessions on the same server, other work on the machine.
type busy struct {
	dbTags  []string // the benchmark's database names
	start   time.Time
	load0   string
	stat0   cpuStat
	self0   time.Duration
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	backend int64            // ticks of our databases' backends, summed
	last    map[int]int64    // pid -> its ticks at the last sample (our backends)
	seen    map[int]struct{} // pids sampled at least once
	primed  bool             // the first sample was taken
}

type cpuStat struct{ total, idle, steal int64 }

func readCPUStat() cpuStat {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuStat{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal guest guest_nice
	var s cpuStat
	for i := 1; i < len(f) && i <= 8; i++ {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		s.total += v
		switch i {
		case 4, 5:
			s.idle += v
		case 8:
			s.steal += v
		}
	}
	return s
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// ownCPU is the CPU time of this process and of its children that were
// waited for.
func ownCPU() time.Duration {
	var d time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) == nil {
			d += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return d
}

// procTicks reads utime+stime of a process from /proc/PID/stat.
func procTicks(pid int) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, false
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s, true
}

func startBusy(dbTags ...string) *busy {
	b := &busy{dbTags: dbTags, start: time.Now(), load0: loadAvg(), stat0: readCPUStat(), self0: ownCPU(),
		stop: make(chan struct{}), done: make(chan struct{}), last: map[int]int64{}, seen: map[int]struct{}{}}
	b.sample()
	b.primed = true
	go func() {
		defer close(b.done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				b.sample()
				return
			case <-t.C:
				b.sample()
			}
		}
	}()
	return b
}

// sample adds the CPU our databases' backends used since the last sample.
// A backend first seen now counts from its start when it started after the
// benchmark did (a connection of this row), else from now.
func (b *busy) sample() {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ok := b.seen[pid]; ok {
			if prev, ours := b.last[pid]; ours {
				if t, ok := procTicks(pid); ok {
					b.backend += t - prev
					b.last[pid] = t
				}
			}
			continue
		}
		b.seen[pid] = struct{}{}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !b.ours(string(cmd)) {
			continue
		}
		t, ok := procTicks(pid)
		if !ok {
			continue
		}
		if b.primed {
			b.backend += t // a backend that started during the row
		}
		b.last[pid] = t
	}
}

func (b *busy) ours(cmdline string) bool {
	if !strings.HasPrefix(cmdline, "postgres: ") {
		return false
	}
	for _, tag := range b.dbTags {
		if strings.Contains(cmdline, " "+tag+" ") {
			return true
		}
	}
	return false
}

// end stops the sampling and says how busy the machine was.
func (b *busy) end() string {
	close(b.stop)
	<-b.done
	s := readCPUStat()
	wall := time.Since(b.start).Seconds()
	ticks := float64(s.total - b.stat0.total)
	if ticks <= 0 || wall <= 0 {
		return "machine: load " + b.load0 + "-" + loadAvg()
	}
	cores := ticks / clockTicks / wall // CPUs the kernel accounted for
	busyCores := float64(s.total-b.stat0.total-(s.idle-b.stat0.idle)-(s.steal-b.stat0.steal)) / clockTicks / wall
	own := (ownCPU() - b.self0).Seconds() / wall
	b.mu.Lock()
	backends := float64(b.backend) / clockTicks / wall
	b.mu.Unlock()
	others := max(0, busyCores-own-backends)
	return fmt.Sprintf("machine: load %s-%s, CPU busy %.2f of %.0f cores (bench+syncd %.2f, its backends %.2f, others %.2f), steal %.1f%%",
		b.load0, loadAvg(), busyCores, cores, own, backends, others, 100*float64(s.steal-b.stat0.steal)/ticks)
}

// gitCommit describes the commit of the working tree the bench runs in
// ("" when git is not there).
func gitCommit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// syncdVersion is what `syncd version` prints.
func syncdVersion(path string) string {
	out, err := exec.Command(path, "version").Output()
	if err != nil {
		return "version unknown"
	}
	return strings.TrimSpace(string(out))
}

// header is the first line of the result: what was measured, where, how
// busy the machine was at the start.
func header(o *options) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("syncd-bench: %s (tree %s), scale %g, %d runs per figure, host %s, %d CPUs, load average at start %s, %s UTC",
		syncdVersion(o.syncd), cmp.Or(gitCommit(), "unknown"), o.scale, o.runs, host, runtime.NumCPU(), loadAvg(), time.Now().UTC().Format("2006-01-02 15:04"))
}

// note appends s to the notes of the rows from index from on.
func (t *table) note(from int, s string) {
	for i := from; i < len(t.rows); i++ {
		t.rows[i].note += "; " + s
	}
}
