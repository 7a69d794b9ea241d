package daemon_test

import (
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/ops"
)

// takeDefaultAddr holds the default admin address for the test, serving a
// status that belongs to another daemon (another state file).
func takeDefaultAddr(t *testing.T) {
	t.Helper()
	var ln net.Listener
	var err error
	testutil.Eventually(t, 30*time.Second, "the default admin address to be free", func() bool {
		ln, err = net.Listen("tcp", daemon.DefaultListen)
		return err == nil
	})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"state": "/var/lib/other/syncd.db", "sources": []}`))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
}

// A daemon started without --listen while another process has the default
// address runs without HTTP and says so (two replicas on one host must not
// crash each other); status reaches it over its admin socket, and refuses
// the status of the other process when sent there with --listen. An
// address asked for with --listen must be free: exit 2.
func TestDefaultAddressInUse(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 300)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "^schedule: \"@every 1s\"")
	takeDefaultAddr(t)
	state := filepath.Join(t.TempDir(), "state.db")
	p := syncd.Start(t, nil, "run", "--config", path, "--state", state)
	testutil.Eventually(t, 20*time.Second, "the copy", func() bool { return f.diff(t, "src", "copy") == 0 })
	if !strings.Contains(p.Output.String(), "admin HTTP off: the default address is in use by another process") {
		t.Fatalf("no line says the admin HTTP is off")
	}
	// The total, not the last run's rows: at @every 1s an idle run can
	// follow the first before status asks.
	r := syncd.Run(t, nil, "status", "--config", path, "--state", state, "--json")
	var st ops.Status
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &st) != nil || len(st.Sources) != 1 || st.Sources[0].Name != "orders" || st.Sources[0].RowsWritten != 300 {
		t.Fatalf("status over the admin socket: exit %d, r.Stdout %q, r.Stderr %q; want the daemon's status with 300 rows written to orders", r.Code, r.Stdout, r.Stderr)
	}
	r = syncd.Run(t, nil, "status", "--config", path, "--state", state, "--listen", daemon.DefaultListen)
	if r.Code != 1 || !strings.Contains(r.Stderr, "holds another state file (/var/lib/other/syncd.db)") || r.Stdout != "" {
		t.Fatalf("status through another daemon's address: exit %d, r.Stdout %q, r.Stderr %q; want exit 1 refusing its status", r.Code, r.Stdout, r.Stderr)
	}
	p.Signal(t, syscall.SIGTERM)
	if c := p.Wait(t, 10*time.Second).Code; c != 0 {
		t.Fatalf("exit %d, want 0", c)
	}
	// An address asked for with --listen must be free: that is an error.
	r = syncd.Run(t, nil, "run", "--config", path, "--state", state, "--listen", daemon.DefaultListen)
	if r.Code != 2 || !strings.Contains(r.Stderr, "listen tcp "+daemon.DefaultListen) || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
		t.Fatalf("--listen on a busy address: exit %d, r.Stderr %q; want 2 and one line naming the address", r.Code, r.Stderr)
	}
}
