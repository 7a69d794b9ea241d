package daemon_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testutil"
)

// A reload reads every YAML document of a file as a source: a pattern
// source added as a second document starts one source per matched table,
// and a table excluded by a later reload stops being synced.
func TestReloadDocumentsAndPatterns(t *testing.T) {
	f := newFixture(t)
	f.db.Exec(t, `CREATE SCHEMA copy`)
	for _, s := range []string{"a_src", "p_one", "p_two"} {
		f.table(t, s, 100)
	}
	f.db.Exec(t, `CREATE TABLE p_nocursor (id bigint PRIMARY KEY)`)
	every := "^schedule: \"@every 1s\""
	path := f.source(t, "all.yaml", "a", "a_src", "a_copy", every)
	first := readFile(t, path)
	addr := testutil.FreeAddr(t)
	p := syncd.Start(t, nil, "run", "--config", path, "--state", filepath.Join(t.TempDir(), "state.db"), "--listen", addr, "--log-level", "debug") // idle runs log "run done" at debug
	testutil.Eventually(t, 20*time.Second, "a synced", func() bool { return f.diff(t, "a_src", "a_copy") == 0 })

	pattern := func(extra string) string {
		return fmt.Sprintf(`name: p
schedule: "@every 1s"
source:
  dsn: %s
  table: public.p_*
  cursor: [updated_at, id]
%s
sink:
  dsn: %s
  table: copy.*
`, f.dsn(), extra, f.dsn())
	}
	writeFile(t, path, first+"---\n"+pattern(""))
	p.Signal(t, syscall.SIGHUP)
	testutil.Eventually(t, 20*time.Second, "both tables of the pattern synced", func() bool {
		return f.diff(t, "p_one", "copy.p_one") == 0 && f.diff(t, "p_two", "copy.p_two") == 0
	})
	if p.Output.Count("config reloaded", "added", []string{"p"}, "changed", nil, "removed", nil) != 1 {
		t.Errorf("the reload did not add the second document's source p:\n%s", p.Output.String())
	}
	// The table without the cursor column is skipped: said once in the log,
	// counted in the metrics.
	m := testutil.Scrape(t, addr).Series
	if m[`syncd_pattern_tables{source="p",state="synced"}`] != 2 || m[`syncd_pattern_tables{source="p",state="skipped"}`] != 1 ||
		m[`syncd_pattern_match_failed{source="p"}`] != 0 {
		t.Errorf("pattern metrics: synced %v, skipped %v, failed %v; want 2, 1, 0", m[`syncd_pattern_tables{source="p",state="synced"}`],
			m[`syncd_pattern_tables{source="p",state="skipped"}`], m[`syncd_pattern_match_failed{source="p"}`])
	}
	if n := p.Output.Count("", "table_source", "p.p_nocursor", "reason", `source p.p_nocursor (table public.p_nocursor) skipped: source.cursor: column "updated_at" does not exist in public.p_nocursor (exclude it with source.exclude, or give it a cursor under tables:, such as tables: {p_nocursor: {cursor: [...]}})`); n != 1 {
		t.Errorf("no log line names the skipped table and why:\n%s", p.Output.String())
	}

	writeFile(t, path, first+"---\n"+pattern(`  exclude: [p_two]`))
	p.Signal(t, syscall.SIGHUP)
	testutil.Eventually(t, 20*time.Second, "p.p_two removed", func() bool {
		return p.Output.Count("pattern source matched", "source", "p", "removed", []string{"p.p_two"}) == 1
	})
	// A run of p.p_two in flight at the reload finishes, and then its
	// metrics go; rows written after it must not reach the copy.
	testutil.Eventually(t, 20*time.Second, "p.p_two's last run to end", func() bool {
		for k := range testutil.Scrape(t, addr).Series {
			if strings.Contains(k, `source="p.p_two"`) {
				return false
			}
		}
		return true
	})
	f.insert(t, "p_one", 101, 120)
	f.insert(t, "p_two", 101, 120)
	// p.p_one's ticks come at the moments p.p_two's would: two runs of
	// p.p_one that began after the inserts are two ticks at which p.p_two
	// did not run.
	runs := p.Output.Count("run done", "source", "p.p_one")
	testutil.Eventually(t, 30*time.Second, "p_one's new rows and two more runs of p.p_one", func() bool {
		return f.diff(t, "p_one", "copy.p_one") == 0 && p.Output.Count("run done", "source", "p.p_one") >= runs+3
	})
	if n := f.count(t, "copy.p_two"); n != 100 {
		t.Errorf("the excluded table still syncs: its copy has %d rows, want 100", n)
	}
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 10*time.Second).Code; code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
}
