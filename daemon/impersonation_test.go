package daemon_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/ops"
)

// impostor is a local process on an admin address that is not the daemon.
// It records every request and its Authorization header, relays
// GET /identity to the real daemon (the strongest fake: it passes the
// daemon's own proof along), and answers status and resync with fakes.
type impostor struct {
	addr string
	mu   sync.Mutex
	reqs []string // "METHOD PATH Authorization"
}

func startImpostor(t *testing.T, realAddr, state string) *impostor {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	im := &impostor{addr: ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		im.mu.Lock()
		im.reqs = append(im.reqs, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		im.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/identity":
			resp, err := http.Get("http://" + realAddr + r.URL.RequestURI())
			if err != nil {
				w.WriteHeader(500)
				return
			}
			defer resp.Body.Close()
			_, _ = io.Copy(w, resp.Body)
		case "/status":
			_ = json.NewEncoder(w).Encode(ops.Status{State: state, Sources: []ops.SourceStatus{{Name: "orders", LastStatus: "ok", RowsTotal: 123456789}}})
		default:
			_, _ = w.Write([]byte(`{"message": "source orders: watermark cleared; the next run re-reads the whole source", "applied": true}`))
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return im
}

func (im *impostor) requests() []string {
	im.mu.Lock()
	defer im.mu.Unlock()
	return append([]string(nil), im.reqs...)
}

// The CLI never sends the admin token to, nor believes, a process it has
// not verified as the daemon holding the state file: a process on an admin
// address (even one relaying the daemon's identity proof) gets no token and
// its answers are not printed. Without --listen the CLI uses the daemon's
// admin socket (mode 0600, no token needed), which a stale socket left by a
// killed daemon does not block.
func TestAdminChannelCannotBeImpersonated(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 300)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "^schedule: \"@every 1h\"")
	state := filepath.Join(t.TempDir(), "state.db")
	addr := testutil.FreeAddr(t)
	env := []string{"SYNCD_ADMIN_TOKEN=" + token}
	p := syncd.Start(t, env, "run", "--config", path, "--state", state, "--listen", addr)
	testutil.Eventually(t, 20*time.Second, "the first run", func() bool { return p.Output.Count("run done") > 0 })
	im := startImpostor(t, addr, state)

	for _, args := range [][]string{
		{"resync", "--config", path, "--state", state, "--source", "orders", "--from-start", "--listen", im.addr},
		{"status", "--config", path, "--state", state, "--listen", im.addr},
		{"status", "--config", path, "--state", state, "--listen", im.addr, "--json"},
	} {
		r := syncd.Run(t, env, args...)
		if r.Code != 1 || r.Stdout != "" || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 || !strings.Contains(r.Stderr, "cannot prove it; nothing was sent to it") {
			t.Errorf("syncd %s: exit %d, stdout %q, stderr %q; want exit 1, nothing on stdout, one line refusing the process", args[0], r.Code, r.Stdout, r.Stderr)
		}
	}
	for _, r := range im.requests() {
		if !strings.HasPrefix(r, "GET /identity ") || strings.Contains(r, token) || strings.TrimSpace(strings.TrimPrefix(r, "GET /identity ")) != "" {
			t.Errorf("the impostor received %q; want only identity challenges, without a token", r)
		}
	}
	if n := len(im.requests()); n != 3 {
		t.Errorf("the impostor received %d requests, want 3 identity challenges", n)
	}

	// The admin socket and the identity secret are the daemon user's only.
	for _, file := range []string{daemon.SocketPath(state), daemon.IdentityPath(state)} {
		fi, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s has mode %v, want 0600", file, perm)
		}
	}

	// Without --listen: the socket, no token, the real answers.
	before := len(im.requests())
	r := syncd.Run(t, nil, "status", "--config", path, "--state", state, "--json")
	var st ops.Status
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &st) != nil || len(st.Sources) != 1 || st.Sources[0].RowsWritten != 300 {
		t.Fatalf("status over the socket: exit %d, stdout %q, stderr %q; want the daemon's status with 300 rows written", r.Code, r.Stdout, r.Stderr)
	}
	r = syncd.Run(t, nil, "resync", "--config", path, "--state", state, "--source", "orders", "--from-start")
	if r.Code != 0 || !strings.Contains(r.Stdout, "source orders: watermark cleared") {
		t.Fatalf("resync over the socket without a token: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	_, api := httpGet(t, "http://"+addr+"/status")
	if err := json.Unmarshal([]byte(api), &st); err != nil || st.Sources[0].Cursor != nil || st.Sources[0].ResyncFrom != "" {
		t.Errorf("after resync over the socket the daemon's status is %s", api)
	}
	if len(im.requests()) != before {
		t.Errorf("the impostor was contacted without --listen: %v", im.requests()[before:])
	}

	// A daemon killed outright leaves its socket; the next one takes over.
	p.Kill(t)
	if _, err := os.Lstat(daemon.SocketPath(state)); err != nil {
		t.Fatalf("the killed daemon's socket is gone (%v); the test needs a stale one", err)
	}
	p = syncd.Start(t, nil, "run", "--config", path, "--state", state, "--listen", "")
	testutil.Eventually(t, 20*time.Second, "the second daemon's run", func() bool { return p.Output.Count("run done") > 0 })
	r = syncd.Run(t, nil, "status", "--config", path, "--state", state)
	if r.Code != 0 || !strings.Contains(r.Stdout, "orders") {
		t.Fatalf("status after a restart over a stale socket: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	p.Signal(t, syscall.SIGTERM)
	if c := p.Wait(t, 10*time.Second).Code; c != 0 {
		t.Fatalf("exit %d after SIGTERM", c)
	}
	for _, file := range []string{daemon.SocketPath(state), daemon.IdentityPath(state)} {
		if _, err := os.Lstat(file); err == nil {
			t.Errorf("%s is left after a clean stop", file)
		}
	}
}
