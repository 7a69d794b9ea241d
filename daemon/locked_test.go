package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/ops"
)

// A copy locked by another session (an open transaction holding an ACCESS
// EXCLUSIVE lock) makes each of the daemon's runs fail after
// sink.lock_timeout with a transient fault that is tried again; between
// attempts the run lock is released and status shows the failure and its
// reason. Once the lock goes, an attempt completes and the copy equals the
// source.
func TestDaemonRetriesRunOnLockedCopy(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 300)
	yaml := fmt.Sprintf(`name: orders
schedule: "@every 1h"
source:
  dsn: %s
  table: public.src
  cursor: [updated_at, id]
  page_size: 100
sink:
  dsn: %s
  table: public.copy
  key: [id]
  lock_timeout: 500ms
`, f.dsn(), f.dsn())
	path := filepath.Join(f.dir, "orders.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state.db")
	if r := syncd.Run(t, nil, "run", "--once", "--config", path, "--state", state); r.Code != 0 {
		t.Fatalf("first run: exit %d: %s", r.Code, r.Stderr)
	}
	f.db.Exec(t, `UPDATE src SET v = 'changed', updated_at = clock_timestamp() WHERE id % 7 = 0`)
	f.insert(t, "src", 301, 450)

	ctx := context.Background()
	locker, err := pgx.Connect(ctx, f.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)
	var pid int
	if err := locker.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := locker.Exec(ctx, "BEGIN; LOCK TABLE copy IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	addr := testutil.FreeAddr(t)
	p := syncd.Start(t, nil, "run", "--config", path, "--state", state, "--listen", addr)
	testutil.Eventually(t, 30*time.Second, "two attempts failed on the lock", func() bool {
		return p.Output.Count("", "kind", "lock_timeout") >= 2
	})
	// Between attempts no syncd session holds the run lock, and status
	// (asked of the daemon) shows the failed attempt and why.
	testutil.Eventually(t, 20*time.Second, "the run lock released between attempts", func() bool {
		return f.count(t, "pg_locks l JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory' AND a.application_name = 'syncd' AND a.datname = current_database()") == 0
	})
	r := syncd.Run(t, nil, "status", "--config", path, "--state", state, "--listen", addr, "--json")
	if r.Code != 0 {
		t.Fatalf("status: exit %d: %s", r.Code, r.Stderr)
	}
	var st ops.Status
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		t.Fatal(err)
	}
	if s := st.Sources[0]; s.LastStatus != "failed" || !strings.Contains(s.LastError, "sink table public.copy is locked by another session") ||
		!strings.Contains(s.LastError, fmt.Sprintf("pid %d", pid)) {
		t.Errorf("status during the lock: %q %q, want the failure naming the copy and the session", s.LastStatus, s.LastError)
	}
	if strings.Contains(p.Output.String(), "permanent error") {
		t.Errorf("a lock timeout was taken for a permanent error")
	}

	if _, err := locker.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "a run done after the lock went", func() bool {
		return p.Output.Count("run done") > 0
	})
	f.requireEqual(t, "src", "copy")
	r = syncd.Run(t, nil, "status", "--config", path, "--state", state, "--listen", addr, "--json")
	if err := json.Unmarshal([]byte(r.Stdout), &st); r.Code != 0 || err != nil {
		t.Fatalf("status: exit %d: %v", r.Code, err)
	}
	if s := st.Sources[0]; s.LastStatus != "ok" || s.RowsTotal != 450+int64(f.count(t, "src WHERE id % 7 = 0 AND id <= 300")) {
		t.Errorf("status after the lock went: %q, %d rows applied in all", s.LastStatus, s.RowsTotal)
	}
}
