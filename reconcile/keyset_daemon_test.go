package reconcile_test

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/watermark"
)

// TestDaemonScheduledKeyCheck runs the real daemon with only
// reconcile: {keys_schedule: "@every 1s", repair: true}: its key check
// deletes the rows hard-deleted at the source on its own, counts them in
// syncd_reconcile_keys_deleted_total (born at 0), and records its result
// in the state file for status.
func TestDaemonScheduledKeyCheck(t *testing.T) {
	f := newFixture(t, 500, "reconcile:\n  keys_schedule: \"@every 1s\"\n  repair: true")
	f.closeStore(t)
	f.src.Exec(t, `DELETE FROM public.items WHERE id IN (7, 250, 499)`)

	d := testutil.Binary{Path: builder.Path(t)}.Start(t, nil, "run", "--config", f.cfgFile, "--state", f.stateFile, "--listen", "127.0.0.1:0")
	e, ok := d.Output.AwaitEntry(60*time.Second, "admin HTTP listening")
	if !ok {
		t.Fatalf("no admin address logged:\n%s", d.Output.String())
	}
	deleted := regexp.MustCompile(`(?m)^syncd_reconcile_keys_deleted_total\{source="items"\} (\S+)$`)
	scrape := func() (float64, bool) {
		resp, err := http.Get("http://" + e.Text("addr") + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		m := deleted.FindSubmatch(body)
		if m == nil {
			return 0, false
		}
		v, err := strconv.ParseFloat(string(m[1]), 64)
		return v, err == nil
	}
	if _, ok := scrape(); !ok {
		t.Fatal("syncd_reconcile_keys_deleted_total is not exported from the start")
	}
	d.Eventually(t, 60*time.Second, "the scheduled key check to delete the 3 rows deleted at the source", func() bool {
		v, _ := scrape()
		return v == 3
	})
	if _, ok := d.Output.Find("scheduled key check done", "deleted", 3); !ok {
		t.Errorf("no log line of the key check that deleted 3 rows:\n%s", d.Output.String())
	}
	f.assertSameRows(t)
	if r := d.Stop(t, 30*time.Second); r.Code != 0 {
		t.Errorf("daemon exit after SIGTERM: %s", r)
	}
	st, _, err := watermark.ReadState(f.stateFile, "items", 5*time.Second)
	if err != nil || st.LastKeyCheck == nil || len(st.LastKeyCheck.Differences) != 0 {
		t.Fatalf("state after the daemon's key checks: %+v (%v)", st.LastKeyCheck, err)
	}
}
