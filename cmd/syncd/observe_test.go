package main_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/metrics"
)

// statusDoc is the part of `status --json` these tests read.
type statusDoc struct {
	Sources []struct {
		Name string `json:"name"`
	} `json:"sources"`
	Skipped []struct {
		Pattern, Source, Table, Reason, Message string
	} `json:"skipped_tables"`
}

// skippedReasons maps each skipped table's source name to its reason.
func skippedReasons(t *testing.T, env []string, cfg string) map[string]string {
	t.Helper()
	r := bin.Run(t, env, "status", "--json", "--config", cfg)
	var st statusDoc
	if err := json.Unmarshal([]byte(r.Stdout), &st); r.Code != 0 || err != nil {
		t.Fatalf("status --json: exit %d, %v\n%s%s", r.Code, err, r.Stdout, r.Stderr)
	}
	out := map[string]string{}
	for _, s := range st.Skipped {
		if s.Pattern != "shop" || s.Message == "" || s.Table != "public."+strings.TrimPrefix(s.Source, "shop.") {
			t.Errorf("skipped table %+v: want pattern shop, its table and a message", s)
		}
		out[s.Source] = s.Reason
	}
	return out
}

// The tables shopSchema's pattern skips, with their reasons.
var shopSkipped = map[string]string{
	"shop.customers": "no_cursor_column",
	"shop.events":    "no_cursor_column",
	"shop.nokey":     "no_primary_key",
}

// A pattern's skipped tables are in status (text and --json) with their
// reason, recorded by run --once and by the daemon, read from the state
// file and from the running daemon; the daemon shows each as
// syncd_pattern_table_skipped and stays ready. Its tables without an index
// in cursor order are logged once however many runs, and shown by
// syncd_cursor_index_missing until the index is created. Every known
// series of the dashboard and the counters' known labels exist from the
// start, at 0.
func TestSkippedTablesAndIndexMetrics(t *testing.T) {
	src, dst := shopSchema(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "shop.yaml", fmt.Sprintf(shopConfig, "id"))
	state := filepath.Join(dir, "state.db")
	env := []string{"SYNCD_TEST_SRC=" + src.URL, "SYNCD_TEST_DST=" + dst.URL, "SYNCD_STATE=" + state}

	if r := bin.Run(t, env, "run", "--once", "--config", cfg); r.Code != 1 {
		t.Fatalf("run --once: exit %d, want 1 (tables skipped)\n%s", r.Code, r.Stderr)
	}
	status := []string{"SYNCD_STATE=" + state}
	if got := skippedReasons(t, status, cfg); fmt.Sprint(got) != fmt.Sprint(shopSkipped) {
		t.Fatalf("status --json after run --once lists skipped tables %v, want %v", got, shopSkipped)
	}
	r := bin.Run(t, status, "status", "--config", cfg)
	if r.Code != 0 || !strings.Contains(r.Stdout, "shop.events: skipped by pattern source shop (no_cursor_column, recorded ") ||
		!strings.Contains(r.Stdout, `source.cursor: column "updated_at" does not exist in public.events (exclude it with source.exclude, or give it a cursor under tables:, such as tables: {events: {cursor: [...]}}); fix it or add public.events to source.exclude`) ||
		!strings.Contains(r.Stdout, "shop.nokey: skipped by pattern source shop (no_primary_key, ") {
		t.Fatalf("status text: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}

	addr := testutil.FreeAddr(t)
	d := bin.Start(t, env, "run", "--config", cfg, "--listen", addr)
	var mfs testutil.Metrics
	waitFor(t, 60*time.Second, "three runs of shop.orders", func() bool {
		var err error
		if mfs, err = testutil.TryScrape(addr); err != nil {
			return false
		}
		n, _ := mfs.Value("syncd_runs_total", map[string]string{"source": "shop.orders", "outcome": "ok"})
		return n >= 3
	})
	for src, reason := range shopSkipped {
		table := "public." + strings.TrimPrefix(src, "shop.")
		if v, ok := mfs.Value("syncd_pattern_table_skipped", map[string]string{"source": "shop", "table": table, "reason": reason}); !ok || v != 1 {
			t.Errorf("syncd_pattern_table_skipped{source=shop,table=%s,reason=%s} = %v (present %v), want 1", table, reason, v, ok)
		}
	}
	if n := len(mfs.Families["syncd_pattern_table_skipped"].GetMetric()); n != len(shopSkipped) {
		t.Errorf("syncd_pattern_table_skipped has %d series, want %d", n, len(shopSkipped))
	}
	for _, name := range []string{"shop.orders", "shop.metrics"} {
		if v, ok := mfs.Value("syncd_cursor_index_missing", map[string]string{"source": name}); !ok || v != 1 {
			t.Errorf("syncd_cursor_index_missing{source=%s} = %v (present %v), want 1", name, v, ok)
		}
		if n := indexWarnings(d.Stderr.String(), name); n != 1 {
			t.Errorf("the missing index of %s was logged %d times over three runs, want once", name, n)
		}
		// Born at 0: increase() sees the first of each.
		for _, kind := range metrics.ErrorKinds {
			if v, ok := mfs.Value("syncd_errors_total", map[string]string{"source": name, "kind": kind}); !ok || v != 0 {
				t.Errorf("syncd_errors_total{source=%s,kind=%s} = %v (present %v), want 0 from the start", name, kind, v, ok)
			}
		}
		for _, o := range []string{"ok", "failed", "skipped"} {
			if v, ok := mfs.Value("syncd_reconcile_runs_total", map[string]string{"source": name, "outcome": o}); !ok || v != 0 {
				t.Errorf("syncd_reconcile_runs_total{source=%s,outcome=%s} = %v (present %v), want 0", name, o, v, ok)
			}
		}
		for _, c := range metrics.SchemaChangeKinds {
			if _, ok := mfs.Value("syncd_schema_changes_total", map[string]string{"source": name, "change": c}); !ok {
				t.Errorf("syncd_schema_changes_total{source=%s,change=%s} is missing", name, c)
			}
		}
	}
	// A skipped table is an alert, not a reason to stop a rollout.
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/readyz = %d with skipped tables, want 200", resp.StatusCode)
	}
	// status asks the daemon, which holds the state file.
	if got := skippedReasons(t, status, cfg); fmt.Sprint(got) != fmt.Sprint(shopSkipped) {
		t.Errorf("status --json from the daemon lists skipped tables %v, want %v", got, shopSkipped)
	}
	if r := bin.Run(t, status, "status", "--config", cfg); r.Code != 0 || !strings.Contains(r.Stdout, "shop.customers: skipped by pattern source shop (no_cursor_column") {
		t.Errorf("status text from the daemon: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}

	// The index created, the next run clears the gauge.
	src.Exec(t, `CREATE INDEX ON orders (updated_at, id)`)
	waitFor(t, 30*time.Second, "syncd_cursor_index_missing{source=shop.orders} 0", func() bool {
		v, ok := testutil.Scrape(t, addr).Value("syncd_cursor_index_missing", map[string]string{"source": "shop.orders"})
		return ok && v == 0
	})
	if r := d.Stop(t, 20*time.Second); r.Code != 0 {
		t.Fatalf("daemon exit after SIGTERM: %s", r)
	}
}

// A daemon shows the dashboard's reconcile differences from its start, at
// 0 for a source with a reconcile schedule that has none recorded, and
// with the differences the state file recorded once a reconcile ran.
func TestReconcileDifferencesAtStart(t *testing.T) {
	src, dst := setupOrders(t)
	src.Exec(t, "CREATE INDEX ON orders (updated_at, id)")
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "orders.yaml", orders(t, src, dst, "")+"reconcile:\n  schedule: \"@every 1h\"\n")
	state := filepath.Join(dir, "s.db")
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("run --once: exit %d\n%s", r.Code, r.Stderr)
	}
	daemonSeries := func() map[string]float64 {
		addr := testutil.FreeAddr(t)
		d := bin.Start(t, nil, "run", "--config", cfg, "--state", state, "--listen", addr)
		var mfs testutil.Metrics
		waitFor(t, 30*time.Second, "the daemon's metrics", func() bool {
			var err error
			mfs, err = testutil.TryScrape(addr)
			return err == nil
		})
		if r := d.Stop(t, 20*time.Second); r.Code != 0 {
			t.Fatalf("daemon exit after SIGTERM: %s", r)
		}
		out := map[string]float64{}
		for _, k := range metrics.ReconcileKinds {
			if v, ok := mfs.Value("syncd_reconcile_differences", map[string]string{"source": "orders", "kind": k}); ok {
				out[k] = v
			}
		}
		return out
	}
	if got := daemonSeries(); fmt.Sprint(got) != "map[changed:0 duplicate:0 extra:0 missing:0 null_key:0]" {
		t.Errorf("syncd_reconcile_differences at start, before any reconcile = %v, want 0 of each kind", got)
	}
	src.Exec(t, "DELETE FROM orders WHERE id <= 3")
	if r := bin.Run(t, nil, "reconcile", "--config", cfg, "--state", state, "--source", "orders"); r.Code == 2 {
		t.Fatalf("reconcile: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if got := daemonSeries(); got["extra"] != 3 || len(got) != len(metrics.ReconcileKinds) {
		t.Errorf("syncd_reconcile_differences at start after a reconcile found 3 extra rows = %v, want extra 3 and 0 of the others", got)
	}
}
