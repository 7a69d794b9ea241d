package reconcile_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
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
	yaml := fmt.Sprintf(`name: comeback
source:
  dsn: %s
  table: public.members
  cursor: [member_id]
  where: "last_purchase_at < :as_of - interval '180 days'"
sink:
  type: coupon_grants
  dsn: %s
  table: public.coupon_grants
  campaign: comeback-1
`, db.URL, db.URL)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := syncd(t, bin, "run", "--once", "--config", cfg, "--state", state); code != 0 {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	base := []string{"reconcile", "--config", cfg, "--state", state, "--source", "comeback", "--json"}
	if _, errOut, code := syncd(t, bin, base...); code != 0 {
		t.Fatalf("reconcile after a full run: exit %d: %s", code, errOut)
	}
	db.Exec(t, `DELETE FROM public.coupon_grants WHERE member_id = 42`)
	out, _, code := syncd(t, bin, base...)
	var rep jsonReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep.Missing != 1 {
		t.Fatalf("a lost grant: exit %d, report %s (%v)", code, out, err)
	}
	assertKeys(t, "missing", rep.Keys.Missing, "42")
	out, errOut, code := syncd(t, bin, append(base, "--repair")...)
	rep = jsonReport{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || rep.After == nil || rep.After.Missing != 0 {
		t.Fatalf("--repair: exit %d, report %s, stderr %s (%v)", code, out, errOut, err)
	}
}
