package daemon_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testutil"
)

// SIGHUP reloads the config folder between runs: a changed file takes
// effect, an added one starts syncing, a removed one stops, and an invalid
// one keeps its source's previous config and says why.
func TestReloadOnSIGHUP(t *testing.T) {
	f := newFixture(t)
	for _, s := range []string{"a", "b", "c", "d"} {
		f.table(t, s+"_src", 100)
	}
	every := "^schedule: \"@every 1s\""
	f.source(t, "a.yaml", "a", "a_src", "a_copy", every)
	pb := f.source(t, "b.yaml", "b", "b_src", "b_copy", every)
	pc := f.source(t, "c.yaml", "c", "c_src", "c_copy", every)
	p := syncd.Start(t, nil, "run", "--config", f.dir, "--state", filepath.Join(t.TempDir(), "state.db"), "--listen", testutil.FreeAddr(t), "--log-level", "debug") // idle runs log "run done" at debug
	testutil.Eventually(t, 20*time.Second, "a, b and c synced", func() bool {
		return f.diff(t, "a_src", "a_copy") == 0 && f.diff(t, "b_src", "b_copy") == 0 && f.diff(t, "c_src", "c_copy") == 0
	})

	// a: changed (now leaves out rows whose v is 'skip', which changes the
	// meaning of its watermark, so its runs are refused until a resync);
	// b: broken; c: removed; d: added.
	f.source(t, "a.yaml", "a", "a_src", "a_copy", "where: v <> 'skip'\n"+every)
	writeFile(t, pb, "name: b\nsource: [broken\n")
	if err := os.Remove(pc); err != nil {
		t.Fatal(err)
	}
	f.source(t, "d.yaml", "d", "d_src", "d_copy", every)
	p.Signal(t, syscall.SIGHUP)
	testutil.Eventually(t, 10*time.Second, "the reload", func() bool { return p.Output.Count("config reloaded") > 0 })
	out := p.Output.String()
	rec, _ := p.Output.Find("config reloaded")
	if !rec.Match("", "added", []string{"d"}, "changed", []string{"a"}, "removed", []string{"c"}) || !strings.HasSuffix(rec.Text("invalid_files"), `/b.yaml"]`) {
		t.Errorf("reload summary %v, want added [d], changed [a], removed [c], invalid_files [.../b.yaml]", rec)
	}
	rec, ok := p.Output.Find("config file not reloaded: its source keeps its previous config; fix the file and reload again", "source", "b")
	if !ok || !strings.HasSuffix(rec.Text("file"), "/b.yaml") || !regexp.MustCompile(`b\.yaml:\d+: malformed YAML`).MatchString(rec.Text("err")) {
		t.Errorf("no record says why b.yaml was not reloaded (found %v: %v):\n%s", ok, rec, out)
	}

	// Once a's new config is refused, no run of its old config is left
	// that could copy the rows inserted below.
	refused := f.dir + `/a.yaml:6: source.where: the watermark of source a in `
	testutil.Eventually(t, 20*time.Second, "a's new config refused", func() bool {
		_, ok := p.Output.FindFunc(func(e testutil.Entry) bool {
			return e.Match("", "source", "a", "kind", "config") && strings.HasPrefix(e.Text("err"), refused)
		})
		return ok
	})
	f.db.Exec(t, `INSERT INTO a_src (id, v) VALUES (101, 'skip'), (102, 'keep')`)
	f.insert(t, "b_src", 101, 150)
	f.insert(t, "c_src", 101, 150)
	// b's ticks come at the same moments c's would: two more runs of b
	// that began after the inserts are two ticks at which c did not run.
	runsOfB := p.Output.Count("run done", "source", "b")
	testutil.Eventually(t, 30*time.Second, "d synced and two more runs of b", func() bool {
		return f.diff(t, "d_src", "d_copy") == 0 && p.Output.Count("run done", "source", "b") >= runsOfB+3
	})
	f.requireEqual(t, "b_src", "b_copy")
	if n := f.count(t, "c_copy"); n != 100 {
		t.Errorf("removed source c still syncs: its copy has %d rows, want 100", n)
	}
	if n := f.count(t, "a_copy"); n != 100 {
		t.Errorf("a's copy has %d rows, want the 100 copied before its where changed", n)
	}
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 10*time.Second).Code; code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
}
