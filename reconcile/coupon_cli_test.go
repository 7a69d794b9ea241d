package reconcile_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// TestCLICouponGrants drives `syncd reconcile` on a coupon_grants source
// through the real binary: the command dispatches to the campaign's
// reconcile (targets versus grants) and verifies a repair.
func TestCLICouponGrants(t *testing.T) {
	bin := buildBinary(t)
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE public.members (member_id bigint PRIMARY KEY, last_purchase_at timestamptz NOT NULL);
INSERT INTO public.members SELECT i, now() - CASE WHEN i % 2 = 0 THEN interval '400 days' ELSE interval '1 day' END FROM generate_series(1, 300) i`)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "comeback.yaml")
	state := filepath.Join(dir, "state.db")
	yaml := testutil.CampaignYAML("comeback", "", db.URL, "comeback-1")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("run: exit %d: %s", r.Code, r.Stderr)
	}
	base := []string{"reconcile", "--config", cfg, "--state", state, "--source", "comeback", "--json"}
	if r := bin.Run(t, nil, base...); r.Code != 0 {
		t.Fatalf("reconcile after a full run: exit %d: %s", r.Code, r.Stderr)
	}
	db.Exec(t, `DELETE FROM public.coupon_grants WHERE member_id = 42`)
	r := bin.Run(t, nil, base...)
	var rep jsonReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || r.Code != 1 || rep.Missing != 1 {
		t.Fatalf("a lost grant: exit %d, report %s (%v)", r.Code, r.Stdout, err)
	}
	assertKeys(t, "missing", rep.Keys.Missing, "42")
	r = bin.Run(t, nil, append(base, "--repair")...)
	rep = jsonReport{}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || r.Code != 0 || rep.After == nil || rep.After.Missing != 0 {
		t.Fatalf("--repair: exit %d, report %s, stderr %s (%v)", r.Code, r.Stdout, r.Stderr, err)
	}
}
