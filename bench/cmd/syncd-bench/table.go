package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one line of the result table.
type row struct {
	name, syncd, limit, ratio, target, note string
}

type table struct{ rows []row }

func (t *table) add(r row) { t.rows = append(t.rows, r) }

// missing records a row whose feature is not in this build.
func (t *table) missing(name, why string) {
	t.add(row{name: name, syncd: "-", limit: "-", ratio: "-", target: "-", note: "not measured: " + why})
}

func (t *table) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tsyncd\tlimit\tratio\ttarget\tnotes")
	fmt.Fprintln(tw, "---------\t-----\t-----\t-----\t------\t-----")
	for _, r := range t.rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.name, r.syncd, r.limit, r.ratio, r.target, r.note)
	}
	tw.Flush()
}

func median[T int64 | float64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func rate(rows int, d time.Duration) float64 { return float64(rows) / d.Seconds() }

func fmtRate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fM rows/s", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.0fk rows/s", r/1e3)
	}
	return fmt.Sprintf("%.0f rows/s", r)
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

func fmtMB(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/(1<<20)) }

func fmtRows(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func durs(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmtDur(d)
	}
	return strings.Join(parts, " ")
}
