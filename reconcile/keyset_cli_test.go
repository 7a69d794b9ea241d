package reconcile_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/watermark"
)

// TestCLIKeys drives `syncd reconcile --keys` through the real binary:
// exit 0 on equal key sets, 1 with the differences and the commands that
// fix them, --repair deleting the extra rows only, the outcome recorded
// in the state file, and --all.
func TestCLIKeys(t *testing.T) {
	f := newFixture(t, 3000, "")
	f.closeStore(t)
	base := []string{"reconcile", "--keys", "--config", f.cfgFile, "--state", f.stateFile, "--source", "items"}
	out, errOut, code := keysSyncd(t, base...)
	if code != 0 || !strings.Contains(out, "missing: 0, extra: 0\n") || !strings.Contains(out, "the copy holds exactly the source's keys") {
		t.Fatalf("equal keys: exit %d\n%s\n%s", code, out, errOut)
	}

	f.src.Exec(t, `DELETE FROM public.items WHERE id IN (10, 2000)`)
	f.dst.Exec(t, `DELETE FROM public.items_copy WHERE id = 77`)
	f.dst.Exec(t, `UPDATE public.items_copy SET t = 'not a key' WHERE id = 5`)
	out, errOut, code = keysSyncd(t, append(base, "--json")...)
	var rep jsonReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 {
		t.Fatalf("differences: exit %d, %s, %v", code, out, err)
	}
	assertKeys(t, "extra", rep.Keys.Extra, "10", "2000")
	assertKeys(t, "missing", rep.Keys.Missing, "77")
	if rep.Changed != 0 {
		t.Errorf("the key check reported %d changed rows", rep.Changed)
	}
	for _, want := range []string{
		"syncd reconcile: source items: public.items_copy holds 2 keys that public.items does not (rows deleted at the source); run `syncd reconcile --keys --source items --repair` to delete them",
		"public.items_copy lacks 1 keys of synced rows of public.items; the key check does not write rows: run `syncd reconcile --source items --repair`: differences found",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}

	out, errOut, code = keysSyncd(t, append(base, "--repair")...)
	if code != 1 || !strings.Contains(out, "repair: deleted 2\n") || !strings.Contains(out, "after repair: missing: 1, extra: 0\n") ||
		!strings.Contains(out, "missing keys are not written by the key check") {
		t.Fatalf("--repair with a missing key left: exit %d\n%s\n%s", code, out, errOut)
	}
	st, ok, err := watermark.ReadState(f.stateFile, "items", 0)
	if err != nil || !ok || st.LastKeyCheck == nil || st.LastKeyCheck.Deleted != 2 || st.LastKeyCheck.Differences["missing"] != 1 || !st.LastKeyCheck.Repaired {
		t.Fatalf("state after the key repair: %+v (%v)", st.LastKeyCheck, err)
	}
	if !st.LastCleanReconcile.IsZero() {
		t.Errorf("a key check recorded a clean reconcile at %v", st.LastCleanReconcile)
	}
	out, errOut, _ = keysSyncd(t, "status", "--config", f.cfgFile, "--state", f.stateFile)
	if !strings.Contains(out, ": deleted 2 rows deleted at the source; keys differ: 1 missing; run `syncd reconcile --keys --source items --repair`") {
		t.Errorf("status does not show the last key check:\n%s\n%s", out, errOut)
	}
	if _, errOut, code = keysSyncd(t, "reconcile", "--config", f.cfgFile, "--state", f.stateFile, "--source", "items", "--repair"); code != 0 {
		t.Fatalf("full repair: exit %d: %s", code, errOut)
	}
	f.assertSameRows(t)
	out, errOut, code = keysSyncd(t, "reconcile", "--keys", "--all", "--config", f.cfgFile, "--state", f.stateFile)
	if code != 0 || !strings.Contains(out, "items: equal: 2998 keys compared, public.items -> public.items_copy\n") {
		t.Fatalf("--keys --all: exit %d\n%s\n%s", code, out, errOut)
	}
}

// keysSyncd runs the real binary (built once, by builder) and returns its
// stdout, stderr and exit code.
func keysSyncd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	r := testutil.Binary{Path: builder.Path(t)}.Run(t, nil, args...)
	return r.Stdout, r.Stderr, r.Code
}
