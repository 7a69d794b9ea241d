package daemon_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/ops"
)

const token = "s3cret-admin-token"

// `syncd status` and `syncd resync` work while the daemon holds the state
// file: they go through its admin API, resync only with the token.
func TestStatusAndResyncWhileDaemonRuns(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 500)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "page_size: 100\n^schedule: \"@every 1h\"")
	state := filepath.Join(t.TempDir(), "state.db")
	addr := testutil.FreeAddr(t)
	p := syncd.Start(t, []string{"SYNCD_ADMIN_TOKEN=" + token}, "run", "--config", path, "--state", state, "--listen", addr)
	testutil.Eventually(t, 20*time.Second, "the first run", func() bool { return p.Output.Count("run done") > 0 })

	r := syncd.Run(t, nil, "status", "--config", path, "--state", state, "--listen", addr, "--json")
	if r.Code != 0 {
		t.Fatalf("status --json: exit %d: %s", r.Code, r.Stderr)
	}
	_, api := httpGet(t, "http://"+addr+"/status")
	// Ages are measured at the moment of each request.
	lag := regexp.MustCompile(`"(newest_row_age|freshness)_seconds": [0-9.e+-]+`)
	if lag.ReplaceAllString(r.Stdout, "") != lag.ReplaceAllString(api, "") {
		t.Errorf("status --json printed\n%s\nbut GET /status says\n%s", r.Stdout, api)
	}
	var st ops.Status
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Sources) != 1 || st.Sources[0].RowsTotal != 500 || st.Sources[0].LastStatus != "ok" || st.Sources[0].Watermark == "" {
		t.Fatalf("status = %+v", st)
	}
	r = syncd.Run(t, nil, "status", "--config", path, "--state", state, "--listen", addr)
	if r.Code != 0 || !strings.Contains(r.Stdout, "orders") || !strings.Contains(r.Stdout, "500") {
		t.Errorf("status table: exit %d: %s%s", r.Code, r.Stdout, r.Stderr)
	}

	// No daemon at the address: one line that says what to do.
	r = syncd.Run(t, nil, "status", "--config", path, "--state", state, "--listen", "127.0.0.1:1")
	if r.Code != 1 || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 || !strings.Contains(r.Stderr, "no syncd daemon answers at 127.0.0.1:1") {
		t.Errorf("status with no daemon at --listen: exit %d, stderr %q", r.Code, r.Stderr)
	}

	// resync without the token is refused and changes nothing.
	r = syncd.Run(t, nil, "resync", "--config", path, "--state", state, "--listen", addr, "--source", "orders", "--from-start")
	if r.Code != 1 || !strings.Contains(r.Stderr, "refused the admin token") {
		t.Errorf("resync without token: exit %d, stderr %q", r.Code, r.Stderr)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, token+"\n")
	r = syncd.Run(t, nil, "resync", "--config", path, "--state", state, "--listen", addr, "--source", "orders", "--from-start", "--admin-token-file", tokenFile)
	if r.Code != 0 || !strings.Contains(r.Stdout, "source orders: watermark cleared; the next run re-reads the whole source") {
		t.Fatalf("resync with token file: exit %d: %s%s", r.Code, r.Stdout, r.Stderr)
	}
	_, api = httpGet(t, "http://"+addr+"/status")
	if err := json.Unmarshal([]byte(api), &st); err != nil {
		t.Fatal(err)
	}
	if st.Sources[0].Watermark != "" || st.Sources[0].Cursor != nil {
		t.Errorf("after resync the watermark is %q", st.Sources[0].Watermark)
	}
	if strings.Contains(p.Output.String(), token) {
		t.Error("the daemon's output shows the admin token")
	}
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 10*time.Second).Code; code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	// The next run re-reads the whole source. (The daemon may have run
	// the source again before it stopped, an idle run re-reading its
	// lookback window, at its spread tick: count from here.)
	before := statusOf(t, path, state).Sources[0]
	if r := syncd.Run(t, nil, "run", "--once", "--config", path, "--state", state); r.Code != 0 {
		t.Fatalf("run --once: exit %d: %s", r.Code, r.Stderr)
	}
	// Re-read rows are counted apart from rows written.
	if st := statusOf(t, path, state).Sources[0]; st.RowsRead-before.RowsRead != 500 || st.RowsWritten != 500 || st.RowsUnchanged-before.RowsUnchanged != 500 || st.RowsTotal != 500 {
		t.Errorf("after a resync from the start: rows read %d (was %d), written %d, unchanged %d (was %d), applied %d; want 500 more read, 500 written in all, 500 more unchanged",
			st.RowsRead, before.RowsRead, st.RowsWritten, st.RowsUnchanged, before.RowsUnchanged, st.RowsTotal)
	}
	f.requireEqual(t, "src", "copy")
}

func postResync(t *testing.T, addr, tok string, req daemon.ResyncRequest) (int, daemon.Reply) {
	t.Helper()
	b, _ := json.Marshal(req)
	hreq, err := http.NewRequest("POST", "http://"+addr+"/resync", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		hreq.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r daemon.Reply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, r
}

// A resync asked for while a run is going waits for the run's end: the run
// keeps writing its watermark page after page, and only then is it moved
// back.
func TestResyncDuringRunTakesEffectAtRunEnd(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 400)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "page_size: 20\nwhere: slow(5)\n^schedule: \"@every 1h\"")
	d := startDaemon(t, path, func(o *daemon.Options) { o.AdminToken = token })
	testutil.Eventually(t, 20*time.Second, "3 pages", func() bool { return f.count(t, "copy") >= 60 })

	if code, r := postResync(t, d.addr, "wrong", daemon.ResyncRequest{Source: "orders", FromStart: true}); code != 401 {
		t.Errorf("wrong token: %d %q", code, r.Message)
	}
	if code, r := postResync(t, d.addr, token, daemon.ResyncRequest{Source: "nope", FromStart: true}); code != 404 {
		t.Errorf("unknown source: %d %q", code, r.Message)
	}
	code, r := postResync(t, d.addr, token, daemon.ResyncRequest{Source: "orders", FromStart: true})
	if code != 202 || r.Applied || !strings.Contains(r.Message, "a run is going") {
		t.Fatalf("resync during a run: %d %+v", code, r)
	}
	before := f.count(t, "copy")
	testutil.Eventually(t, 10*time.Second, "the run to go on after the request", func() bool {
		st := d.state(t, "orders")
		return st.Cursor != nil && f.count(t, "copy") > before+20
	})
	testutil.Eventually(t, 20*time.Second, "the run to end", func() bool { return d.logs.Count("run done") > 0 })
	f.requireEqual(t, "src", "copy")
	testutil.Eventually(t, 5*time.Second, "the resync to apply", func() bool {
		st := d.state(t, "orders")
		return st.Cursor == nil && st.ResyncedFrom == "start"
	})
	if !strings.Contains(d.logs.String(), "resync requested during the run applied") {
		t.Error("no log line says the waiting resync was applied")
	}
	// Idle now: a resync applies at once.
	code, r = postResync(t, d.addr, token, daemon.ResyncRequest{Source: "orders", From: "2026-01-01T00:00:00Z"})
	if code != 200 || !r.Applied {
		t.Errorf("resync while idle: %d %+v", code, r)
	}
	if st := d.state(t, "orders"); st.From != "2026-01-01T00:00:00Z" {
		t.Errorf("watermark from = %q after resync --from", st.From)
	}
}

// Without an admin token the resync endpoint is off.
func TestResyncEndpointOffWithoutToken(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 10)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "^schedule: \"@every 1h\"")
	d := startDaemon(t, path, nil)
	code, r := postResync(t, d.addr, "anything", daemon.ResyncRequest{Source: "orders", FromStart: true})
	if code != 403 || !strings.Contains(r.Message, "resync over HTTP is off") {
		t.Errorf("resync with no token configured: %d %q", code, r.Message)
	}
}

// POST /resync with a time past the source's clock (plus the allowance) is
// a 400 with a JSON message naming the clock, and the watermark stays as it
// was; a time within the allowance is accepted. (Before: 200 "watermark
// moved back", and every row written until then was lost.)
func TestResyncFromTheFutureIsRefused(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 50)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "^schedule: \"@every 1h\"")
	d := startDaemon(t, path, func(o *daemon.Options) { o.AdminToken = token })
	testutil.Eventually(t, 20*time.Second, "the first run", func() bool { return d.state(t, "orders").LastStatus == "ok" })
	before := d.state(t, "orders")

	for _, from := range []string{"2099-01-01T00:00:00Z", time.Now().Add(10 * time.Minute).UTC().Format(time.RFC3339)} {
		code, r := postResync(t, d.addr, token, daemon.ResyncRequest{Source: "orders", From: from})
		if code != 400 || !strings.Contains(r.Message, "source orders: resync to "+from+" refused") || !strings.Contains(r.Message, "past the source's clock") || r.Applied {
			t.Fatalf("resync from %s: %d %+v, want 400 naming the source's clock", from, code, r)
		}
		if after := d.state(t, "orders"); !slices.Equal(after.Cursor, before.Cursor) || after.From != "" || !after.ResyncedAt.IsZero() {
			t.Fatalf("the refused resync changed the state: %+v, was %+v", after, before)
		}
	}
	// Within the clock allowance the time is not refused as future, but it
	// is after the watermark (the rows are stamped now): only skip_rows
	// moves the watermark forward.
	soon := time.Now().Add(20 * time.Second).UTC().Format(time.RFC3339)
	if code, r := postResync(t, d.addr, token, daemon.ResyncRequest{Source: "orders", From: soon}); code != 400 || !strings.Contains(r.Message, "would move it forward") {
		t.Fatalf("resync within the clock allowance, after the watermark: %d %+v, want 400", code, r)
	}
	if code, r := postResync(t, d.addr, token, daemon.ResyncRequest{Source: "orders", From: soon, SkipRows: true}); code != 200 || !r.Applied || !strings.Contains(r.Message, "moved forward") {
		t.Fatalf("resync within the clock allowance with skip_rows: %d %+v, want 200", code, r)
	}
}

// POST /resync with a time after the watermark (in the past) is a 400
// saying the watermark would move forward and how many rows would never be
// copied, and the state is unchanged; with "skip_rows": true it is applied
// and the message says it moved forward and how many rows were skipped.
// (Before: 200 "watermark moved back to ...", and those rows were lost.)
func TestResyncForwardIsRefusedByDaemon(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 100)
	// Row id is stamped 2026-10-01 09:00:00 plus id seconds.
	stamp := `UPDATE src SET updated_at = '2026-10-01 09:00:00+00'::timestamptz + id * interval '1 second' WHERE id BETWEEN $1 AND $2`
	f.db.Exec(t, stamp, 1, 100)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "^schedule: \"@every 1h\"")
	d := startDaemon(t, path, func(o *daemon.Options) { o.AdminToken = token })
	testutil.Eventually(t, 20*time.Second, "the first run", func() bool { return d.state(t, "orders").LastStatus == "ok" })
	f.insert(t, "src", 101, 150)
	f.db.Exec(t, stamp, 101, 150)
	before := d.state(t, "orders")
	if len(before.Cursor) == 0 || before.Cursor[0] != "2026-10-01 09:01:40+00" {
		t.Fatalf("watermark after the first run: %v, want 2026-10-01 09:01:40+00", before.Cursor)
	}

	code, r := postResync(t, d.addr, token, daemon.ResyncRequest{Source: "orders", From: "2026-10-01T09:03:20Z"})
	if code != 400 || r.Applied || !strings.Contains(r.Message, "source orders: resync to 2026-10-01T09:03:20.000000Z refused: the watermark is at 2026-10-01T09:01:40.000000Z, so this would move it forward and 50 source rows between would never be copied") {
		t.Fatalf("resync after the watermark: %d %+v, want 400 naming the 50 rows", code, r)
	}
	if after := d.state(t, "orders"); !slices.Equal(after.Cursor, before.Cursor) || after.From != "" || !after.ResyncedAt.IsZero() {
		t.Fatalf("the refused resync changed the state: %+v, was %+v", after, before)
	}

	code, r = postResync(t, d.addr, token, daemon.ResyncRequest{Source: "orders", From: "2026-10-01T09:03:20Z", SkipRows: true})
	if want := "source orders: watermark moved forward from 2026-10-01T09:01:40.000000Z to 2026-10-01T09:03:20.000000Z: 50 source rows between were skipped"; code != 200 || !r.Applied || !strings.Contains(r.Message, want) {
		t.Fatalf("resync with skip_rows: %d %+v, want 200 and %q", code, r, want)
	}
	if after := d.state(t, "orders"); after.Cursor != nil || after.From != "2026-10-01T09:03:20Z" {
		t.Fatalf("after resync with skip_rows the state is %+v", after)
	}
	code, r = postResync(t, d.addr, token, daemon.ResyncRequest{Source: "orders", From: "2026-10-01T09:00:10Z"})
	if want := "source orders: watermark moved back from 2026-10-01T09:03:20.000000Z to 2026-10-01T09:00:10.000000Z"; code != 200 || !strings.Contains(r.Message, want) {
		t.Fatalf("resync back: %d %+v, want 200 and %q", code, r, want)
	}
}

// `syncd resync --from` a time after the watermark while a daemon holds the
// state file goes through its admin socket, and the daemon's refusal is
// the CLI's: exit 2, its one line on stderr, the watermark unchanged; with
// --skip-rows the CLI sends skip_rows and the watermark moves forward.
func TestResyncForwardThroughDaemonExits2(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 100)
	f.db.Exec(t, `UPDATE src SET updated_at = '2026-10-01 09:00:00+00'::timestamptz + id * interval '1 second'`)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "^schedule: \"@every 1h\"")
	state := filepath.Join(t.TempDir(), "state.db")
	p := syncd.Start(t, nil, "run", "--config", path, "--state", state, "--listen", "")
	testutil.Eventually(t, 20*time.Second, "the first run", func() bool { return p.Output.Count("run done") > 0 })

	r := syncd.Run(t, nil, "resync", "--config", path, "--state", state, "--source", "orders", "--from", "2026-10-01T09:03:20Z")
	line := strings.TrimSpace(r.Stderr)
	if r.Code != 2 || r.Stdout != "" || strings.Contains(line, "\n") || !strings.Contains(line, "refused: the watermark is at 2026-10-01T09:01:40.000000Z, so this would move it forward and a row committed later with a first cursor value between would never be copied (none is there now)") {
		t.Fatalf("resync --from after the watermark through the daemon: exit %d, stdout %q, stderr %q; want exit 2 and the daemon's refusal", r.Code, r.Stdout, r.Stderr)
	}
	if st := statusOf(t, path, state).Sources[0]; st.Watermark != "2026-10-01T09:01:40.000000Z" || st.ResyncFrom != "" {
		t.Fatalf("after the refused resync: watermark %q, resync point %q", st.Watermark, st.ResyncFrom)
	}
	r = syncd.Run(t, nil, "resync", "--config", path, "--state", state, "--source", "orders", "--from", "2026-10-01T09:03:20Z", "--skip-rows")
	if r.Code != 0 || !strings.Contains(r.Stdout, "source orders: watermark moved forward from 2026-10-01T09:01:40.000000Z to 2026-10-01T09:03:20.000000Z") {
		t.Fatalf("resync --skip-rows through the daemon: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if st := statusOf(t, path, state).Sources[0]; st.ResyncFrom != "2026-10-01T09:03:20Z" {
		t.Fatalf("after resync --skip-rows the resync point is %q", st.ResyncFrom)
	}
}
