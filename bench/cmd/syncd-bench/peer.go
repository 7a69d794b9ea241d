package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// pgcopydbPath is pgcopydb's path, or "" when it is not installed.
func pgcopydbPath() string {
	p, err := exec.LookPath("pgcopydb")
	if err != nil {
		return ""
	}
	return p
}

// pgcopydbCopy is one run of `pgcopydb copy table-data` of items into the
// empty sink items (a fresh work directory each time), with as many table
// jobs as syncd's first load has workers.
func (b *bench) pgcopydbCopy(ctx context.Context, path string, run int) (time.Duration, error) {
	if err := b.emptyCopy(ctx, "items"); err != nil {
		return 0, err
	}
	dir := filepath.Join(b.dir, fmt.Sprintf("pgcopydb-%d", run))
	filters := filepath.Join(b.dir, "pgcopydb-filters.ini")
	if err := os.WriteFile(filters, []byte("[include-only-table]\npublic.items\n"), 0o600); err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, path, "copy", "table-data", "--source", b.url(b.srcDB), "--target", b.url(b.dstDB),
		"--table-jobs", "2", "--dir", dir, "--filters", filters)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	os.RemoveAll(dir)
	if err != nil {
		return d, fmt.Errorf("pgcopydb copy table-data: %w: %s", err, lastLines(out.String(), 5))
	}
	n, err := count(ctx, b.dst, "items")
	if err != nil {
		return d, err
	}
	if n != int64(b.rows) {
		return d, fmt.Errorf("the copy has %d rows after pgcopydb copy table-data of %d", n, b.rows)
	}
	return d, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// pgcopydbVersion is the version pgcopydb prints, or "version unknown".
func pgcopydbVersion(path string) string {
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return "version unknown"
	}
	for _, l := range strings.Split(string(out), "\n") {
		if i := strings.Index(l, "pgcopydb version "); i >= 0 {
			return "pgcopydb " + strings.Fields(l[i+len("pgcopydb version "):])[0]
		}
	}
	return "version unknown"
}
