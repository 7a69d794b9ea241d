// Command syncd-bench measures syncd against the physical limit of the same
// machine: every figure is the median of several runs, printed beside the
// limit measured in the same run. It creates its own databases (unique
// names) on the local PostgreSQL and drops them at the end.
//
//	go run ./bench/cmd/syncd-bench -syncd bin/syncd            # full sizes
//	go run ./bench/cmd/syncd-bench -syncd bin/syncd -scale 0.02  # a one-minute smoke test
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	adminURL   string
	syncd      string
	scale      float64
	runs       int
	pageSizes  []int
	plotRuns   int
	plot       string
	only       map[string]bool
	lagFor     time.Duration
	lagLog     string
	sustainFor time.Duration
	keep       bool
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("syncd-bench: ")
	var o options
	var pages, only string
	flag.StringVar(&o.adminURL, "pg", cmp.Or(os.Getenv("SYNCD_TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "URL of the server's maintenance database")
	flag.StringVar(&o.syncd, "syncd", "bin/syncd", "the syncd binary to measure")
	flag.Float64Var(&o.scale, "scale", envFloat("BENCH_SCALE", 1), "fraction of the full sizes (1M/5M rows, 300k members); BENCH_SCALE")
	flag.IntVar(&o.runs, "runs", 3, "runs per figure (the median is printed)")
	flag.StringVar(&pages, "pages", "100,500,1000,5000,10000,50000", "page sizes of the throughput plot (empty: no plot)")
	flag.IntVar(&o.plotRuns, "plot-runs", 1, "runs per page size of the plot")
	flag.StringVar(&o.plot, "plot", "", "write the page-size plot to this PNG file")
	flag.StringVar(&only, "only", "", "comma-separated rows to run: initial,growth,incremental,reconcile,keys,coupon,lag,sustained,idle,many,pages (default all)")
	flag.DurationVar(&o.lagFor, "lag-for", 0, "how long the lag writer runs (default 20s, scaled down to 5s for small scales)")
	flag.StringVar(&o.lagLog, "lag-log", "", "write the lag row's daemon log (JSON, debug level) and its commit/seen times to this file")
	flag.DurationVar(&o.sustainFor, "sustained-for", 0, "how long the sustained-change writers run (default 5m times -scale, at least 5s)")
	flag.BoolVar(&o.keep, "keep", false, "keep the databases (for debugging)")
	flag.Parse()
	for _, p := range strings.Split(pages, ",") {
		if p = strings.TrimSpace(p); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 {
				log.Fatalf("-pages: %q is not a page size", p)
			}
			o.pageSizes = append(o.pageSizes, n)
		}
	}
	if only != "" {
		o.only = map[string]bool{}
		for _, s := range strings.Split(only, ",") {
			o.only[strings.TrimSpace(s)] = true
		}
	}
	if o.runs < 1 {
		o.runs = 1
	}
	if o.lagFor == 0 {
		o.lagFor = 20 * time.Second
		if o.scale < 0.5 {
			o.lagFor = 5 * time.Second
		}
	}
	abs, err := filepath.Abs(o.syncd)
	if err != nil {
		log.Fatal(err)
	}
	o.syncd = abs
	if _, err := os.Stat(o.syncd); err != nil {
		log.Fatalf("%v: build it first (make build)", err)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, &o); err != nil {
		log.Fatal(err)
	}
}

func (o *options) want(row string) bool { return o.only == nil || o.only[row] }

func (o *options) rows(full int) int { return max(1000, int(float64(full)*o.scale)) }

func envFloat(name string, def float64) float64 {
	if v := os.Getenv(name); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
			return f
		}
	}
	return def
}

func run(ctx context.Context, o *options) error {
	b, err := newBench(ctx, o)
	if err != nil {
		return err
	}
	defer b.cleanup()
	fmt.Fprintf(os.Stderr, "syncd-bench: databases %s, %s; scale %g, %d runs per figure\n", b.srcDB, b.dstDB, o.scale, o.runs)
	head := header(o)
	fmt.Fprintln(os.Stderr, head)
	var t table
	var failed []string
	steps := []struct {
		name string
		fn   func(context.Context, *table) error
	}{
		{"initial", b.initialSync},
		{"growth", b.growth}, // first load at 10M rows, before incremental grows items
		{"pages", b.pageSizes},
		{"reconcile", b.reconcile},
		{"keys", b.keyCheck},
		{"coupon", b.coupon},
		{"lag", b.lag},
		{"sustained", b.sustained},
		{"idle", b.idle},
		{"many", b.many},
		{"incremental", b.incremental}, // last: it grows items to 5M rows
	}
	for _, s := range steps {
		if !o.want(s.name) {
			continue
		}
		start := time.Now()
		fmt.Fprintf(os.Stderr, "syncd-bench: %s ...\n", s.name)
		first, load := len(t.rows), startBusy(b.srcDB, b.dstDB)
		err := s.fn(ctx, &t)
		t.note(first, load.end())
		if err != nil {
			// One failed benchmark does not hide the others' figures; the
			// session still fails at the end.
			fmt.Fprintf(os.Stderr, "syncd-bench: %s failed: %v\n", s.name, err)
			t.add(row{name: s.name, syncd: "FAILED", limit: "-", ratio: "-", target: "-", note: oneLine(err.Error())})
			failed = append(failed, s.name)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		fmt.Fprintf(os.Stderr, "syncd-bench: %s done in %s\n", s.name, time.Since(start).Round(time.Second))
	}
	fmt.Println(head)
	t.print(os.Stdout)
	if len(failed) > 0 {
		return fmt.Errorf("%d benchmarks failed: %s", len(failed), strings.Join(failed, ", "))
	}
	return nil
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
