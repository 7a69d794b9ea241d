package reconcile_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/watermark"
)

// buildBinary returns the real binary, built by the first test that asks.
func buildBinary(t *testing.T) testutil.Binary {
	t.Helper()
	return testutil.Binary{Path: builder.Path(t)}
}

type jsonReport struct {
	Missing, Extra, Changed int64
	Keys                    struct{ Missing, Extra, Changed []string }
	RowsCompared            int64       `json:"rows_compared"`
	RowsFetched             int64       `json:"rows_fetched"`
	After                   *jsonReport `json:"after_repair"`
}

func TestCLIExitCodesAndJSON(t *testing.T) {
	bin := buildBinary(t)
	f := newFixture(t, 2000, "")
	f.closeStore(t) // the binary opens the state file
	base := []string{"reconcile", "--config", f.cfgFile, "--state", f.stateFile, "--source", "items"}

	r := bin.Run(t, nil, append(base, "--json")...)
	if r.Code != 0 {
		t.Fatalf("identical tables: exit %d, want 0; stderr %s", r.Code, r.Stderr)
	}
	var rep jsonReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("--json printed %q: %v", r.Stdout, err)
	}
	if rep.Missing+rep.Extra+rep.Changed != 0 || rep.RowsCompared != 2000 || rep.Keys.Missing == nil {
		t.Fatalf("identical tables: %+v", rep)
	}

	f.dst.Exec(t, `DELETE FROM public.items_copy WHERE id = 7`)
	f.dst.Exec(t, `UPDATE public.items_copy SET price = 1.01 WHERE id = 1500`) // 1.0 in the source
	f.src.Exec(t, `DELETE FROM public.items WHERE id = 1999`)
	r = bin.Run(t, nil, append(base, "--json")...)
	if r.Code != 1 {
		t.Fatalf("differences: exit %d, want 1; stderr %s", r.Code, r.Stderr)
	}
	rep = jsonReport{}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("--json printed %q: %v", r.Stdout, err)
	}
	assertKeys(t, "missing", rep.Keys.Missing, "7")
	assertKeys(t, "extra", rep.Keys.Extra, "1999")
	assertKeys(t, "changed", rep.Keys.Changed, "1500")
	if rep.Missing != 1 || rep.Extra != 1 || rep.Changed != 1 || rep.RowsFetched == 0 || rep.RowsFetched > 2000/2 {
		t.Fatalf("report %+v", rep)
	}
	if !strings.Contains(r.Stderr, "1 missing, 1 extra, 1 changed") {
		t.Errorf("stderr %q does not sum up the differences", r.Stderr)
	}

	r = bin.Run(t, nil, base...)
	if r.Code != 1 || !strings.Contains(r.Stdout, "missing: 1, extra: 1, changed: 1") || !strings.Contains(r.Stdout, "  1500\n") {
		t.Fatalf("text output (exit %d):\n%s", r.Code, r.Stdout)
	}

	r = bin.Run(t, nil, append(base, "--repair")...)
	if r.Code != 0 || !strings.Contains(r.Stdout, "after repair: missing: 0, extra: 0, changed: 0") {
		t.Fatalf("--repair: exit %d, want 0\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	f.assertSameRows(t)
	if r = bin.Run(t, nil, base...); r.Code != 0 {
		t.Fatalf("after repair: exit %d, want 0: %s", r.Code, r.Stderr)
	}

	// Usage and config errors exit 2.
	for _, args := range [][]string{
		{"reconcile", "--config", f.cfgFile},
		{"reconcile", "--config", f.cfgFile, "--source", "nope"},
		{"reconcile", "--config", filepath.Join(t.TempDir(), "missing.yaml"), "--source", "items"},
		{"reconcile", "--config", f.cfgFile, "--source", "items", "--bogus"},
	} {
		if r := bin.Run(t, nil, args...); r.Code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, r.Code, r.Stderr)
		}
	}

	// No state file: most likely the wrong path; an error naming it, and
	// reconcile (a read-only command) does not create the file.
	none := filepath.Join(t.TempDir(), "none.db")
	r = bin.Run(t, nil, "reconcile", "--config", f.cfgFile, "--state", none, "--source", "items")
	if r.Code != 2 || !strings.Contains(r.Stderr, "no state file at "+none) {
		t.Fatalf("no state file: exit %d\n%s", r.Code, r.Stderr)
	}
	if _, err := os.Stat(none); !os.IsNotExist(err) {
		t.Fatalf("reconcile created the state file %s", none)
	}

	// A state file without this source's watermark: nothing is synced yet,
	// so nothing is proven: it says so and exits 1.
	empty, err := watermark.Open(filepath.Join(t.TempDir(), "empty.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	empty.Close()
	r = bin.Run(t, nil, "reconcile", "--config", f.cfgFile, "--state", empty.Path(), "--source", "items")
	if r.Code != 1 || !strings.Contains(r.Stdout, "not compared: 1999 rows (no watermark yet)") ||
		!strings.Contains(r.Stderr, "1999 rows of public.items not compared yet (no watermark yet: 1999); run `syncd run --once --source items`, then reconcile again") {
		t.Fatalf("no watermark: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}

	// A daemon holding the state file: the watermark is read from a copy.
	held, err := watermark.Open(f.stateFile, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	f.dst.Exec(t, `UPDATE public.items_copy SET t = 'held' WHERE id = 3`)
	r = bin.Run(t, nil, append(base, "--json")...)
	rep = jsonReport{}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || r.Code != 1 {
		t.Fatalf("state held by a daemon: exit %d, %s %s", r.Code, r.Stdout, r.Stderr)
	}
	assertKeys(t, "changed", rep.Keys.Changed, "3")
}
