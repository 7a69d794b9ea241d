package main_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/testutil"
)

// connPassword is the password of every DSN the connection tests get
// wrong: it must never show in any output.
const connPassword = "Sekr1t-conn-pw"

// connConfig is a source file whose side ("source" or "sink") connects
// with dsn; source.dsn is at line 3 and sink.dsn at line 7.
func connConfig(src, dst *pgtest.DB, side, dsn string) string {
	s, d := src.URL, dst.URL
	if side == "source" {
		s = dsn
	} else {
		d = dsn
	}
	return fmt.Sprintf(`name: orders
source:
  dsn: %q
  table: public.orders
  cursor: [updated_at, id]
sink:
  dsn: %q
  table: public.orders_copy
  key: [id]
`, s, d)
}

// passwordCluster is a throwaway server without TLS that asks every role
// but postgres for its password; syncd_writer's is "right-password".
func passwordCluster(t *testing.T) *pgtest.Cluster {
	t.Helper()
	ctx := context.Background()
	cl, err := pgtest.StartCluster(ctx, "password_encryption = 'scram-sha-256'")
	if err != nil {
		t.Skipf("no throwaway cluster: %v", err)
	}
	t.Cleanup(func() { cl.Destroy(context.Background()) })
	conn, err := pgx.Connect(ctx, cl.URL())
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "CREATE ROLE syncd_writer LOGIN PASSWORD 'right-password'")
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.SetHBA(ctx, "local all all trust", "host all postgres 127.0.0.1/32 trust", "host all all 127.0.0.1/32 scram-sha-256"); err != nil {
		t.Fatal(err)
	}
	return cl
}

// silentListener accepts connections and never answers: a connection to
// it waits for the server's first byte until connect_timeout.
func silentListener(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, unanswered
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// Each kind of connection failure is one line on stderr, for either side
// and from run --once as from validate: the file, the line and the key of
// the DSN, the side, where and as whom, the cause and what to check, and
// never the password. A connection that fails exits 1 (the database may
// come back); a DSN that cannot work as written exits 2, and one that does
// not parse stops the daemon's start with exit 2 as well.
func TestConnectionFailuresAreOneLineEach(t *testing.T) {
	src, dst := setupOrders(t)
	cl := passwordCluster(t)
	refused, silent := closedPort(t), silentListener(t)
	pw := connPassword
	cases := []struct {
		name string
		dsn  string
		code int
		// want is the message after "FILE:LINE: SIDE.dsn: ", SIDE the side.
		want string
	}{
		{"refused", fmt.Sprintf("postgres://writer:%s@127.0.0.1:%d/warehouse", pw, refused), 1,
			fmt.Sprintf("cannot connect to the SIDE at 127.0.0.1:%d (database warehouse, user writer): connection refused: is PostgreSQL running on that host and port? check the host and port in SIDE.dsn", refused)},
		{"unknown host", "postgres://writer:" + pw + "@nonexistent.invalid:5432/warehouse", 1,
			`cannot connect to the SIDE at nonexistent.invalid:5432 (database warehouse, user writer): host name "nonexistent.invalid" not found: check the host in SIDE.dsn`},
		{"no such database", fmt.Sprintf("postgres://syncd_writer:right-password@127.0.0.1:%d/warehouse", cl.Port), 1,
			fmt.Sprintf(`cannot connect to the SIDE at 127.0.0.1:%d (database warehouse, user syncd_writer): database "warehouse" does not exist: check the database name in SIDE.dsn (psql's \l lists them)`, cl.Port)},
		// sslmode=prefer tries TLS first, which this server refuses: the
		// cause is the password, not the refused TLS.
		{"wrong password", fmt.Sprintf("postgres://syncd_writer:%s@127.0.0.1:%d/postgres", pw, cl.Port), 1,
			fmt.Sprintf(`cannot connect to the SIDE at 127.0.0.1:%d (database postgres, user syncd_writer): password authentication failed for user "syncd_writer": check the user and password in SIDE.dsn`, cl.Port)},
		{"TLS required", fmt.Sprintf("postgres://syncd_writer:%s@127.0.0.1:%d/postgres?sslmode=require", pw, cl.Port), 1,
			fmt.Sprintf(`cannot connect to the SIDE at 127.0.0.1:%d (database postgres, user syncd_writer): the server does not accept TLS connections, and the sslmode in SIDE.dsn requires TLS: enable ssl on the server, or set sslmode=prefer (or disable) in SIDE.dsn`, cl.Port)},
		{"timeout", fmt.Sprintf("postgres://writer:%s@127.0.0.1:%d/warehouse?connect_timeout=1", pw, silent), 1,
			fmt.Sprintf(`cannot connect to the SIDE at 127.0.0.1:%d (database warehouse, user writer): no answer within connect_timeout (1s): is the host reachable, and does a firewall let the connection through to that port? check the host and port in SIDE.dsn`, silent)},
		{"bad port", "postgres://writer:" + pw + "@127.0.0.1:99999/warehouse", 2,
			`not a valid connection string: invalid port; write it as a URL, postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=..., or as keyword=value pairs, host=HOST port=PORT dbname=DATABASE user=USER`},
		{"unparsable", "host=127.0.0.1 password=" + pw + " dbname", 2,
			`not a valid connection string: failed to parse as keyword/value (invalid keyword/value); write it as a URL, postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=..., or as keyword=value pairs, host=HOST port=PORT dbname=DATABASE user=USER`},
		{"unknown parameter", fmt.Sprintf("postgres://syncd_writer:right-password@127.0.0.1:%d/postgres?sslmode=disable&statment_timeout=5", cl.Port), 2,
			fmt.Sprintf(`cannot connect to the SIDE at 127.0.0.1:%d (database postgres, user syncd_writer): the server refused a parameter SIDE.dsn sets (unrecognized configuration parameter "statment_timeout"): remove it from SIDE.dsn or correct its spelling`, cl.Port)},
	}
	b := testutil.Binary{Path: binary, Forbid: []string{pw, "right-password"}}
	dir := t.TempDir()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, side := range []string{"source", "sink"} {
				file := writeConfig(t, dir, "orders.yaml", connConfig(src, dst, side, tc.dsn))
				line := map[string]int{"source": 3, "sink": 7}[side]
				at := fmt.Sprintf("%s:%d: %s.dsn: ", file, line, side)
				cmds := []string{"run --once", "validate"}
				if strings.HasPrefix(tc.want, "not a valid connection string") {
					// Refused at load: the daemon does not start either,
					// and exits 2 for systemd's RestartPreventExitStatus.
					cmds = append(cmds, "run")
				}
				for _, cmdline := range cmds {
					cmd, once, _ := strings.Cut(cmdline, " ")
					args := []string{cmd, "--config", file, "--state", filepath.Join(dir, "state.db"), "--listen", ""}
					switch {
					case once != "":
						args = append(args, once)
					case cmd == "validate":
						args = args[:len(args)-2]
					}
					r := b.Run(t, nil, args...)
					want := "syncd " + cmd + ": source orders: " + at + strings.ReplaceAll(tc.want, "SIDE", side)
					if tc.code == 2 { // a config error: no source run
						want = "syncd " + cmd + ": " + at + strings.ReplaceAll(tc.want, "SIDE", side)
					}
					if got := strings.TrimRight(r.Stderr, "\n"); r.Code != tc.code || got != want {
						t.Errorf("%s with a bad %s.dsn: exit %d, want %d; stderr:\n%s\nwant the one line:\n%s", cmdline, side, r.Code, tc.code, r.Stderr, want)
					}
				}
			}
		})
	}
}

// The daemon logs a source that cannot connect with the same one line as
// run --once, once: the attempts that fail the same way after it say
// same_err instead of repeating it. It keeps trying, and stops cleanly.
func TestDaemonLogsConnectionFailureOnce(t *testing.T) {
	src, dst := setupOrders(t)
	port := closedPort(t)
	dir := t.TempDir()
	file := writeConfig(t, dir, "orders.yaml", connConfig(src, dst, "source", fmt.Sprintf("postgres://writer:%s@127.0.0.1:%d/warehouse", connPassword, port)))
	b := testutil.Binary{Path: binary, Forbid: []string{connPassword}}
	d := b.Start(t, nil, "run", "--config", file, "--state", filepath.Join(dir, "state.db"), "--listen", "")
	const msg = "transient fault: the run is tried again from the last committed page"
	first := d.WaitLog(t, 30*time.Second, msg, "source", "orders", "attempt", 1)
	want := fmt.Sprintf("%s:3: source.dsn: cannot connect to the source at 127.0.0.1:%d (database warehouse, user writer): connection refused: is PostgreSQL running on that host and port? check the host and port in source.dsn", file, port)
	if got := first.Text("err"); got != want {
		t.Fatalf("first failed attempt: err %q, want %q", got, want)
	}
	second := d.WaitLog(t, 30*time.Second, msg, "source", "orders", "attempt", 2)
	if _, ok := second.Get("err"); ok || second.Text("same_err") != "true" {
		t.Fatalf("second attempt, failing the same way, should say same_err and not repeat the error: %v", second)
	}
	if r := d.Stop(t, 30*time.Second); r.Code != 0 {
		t.Fatalf("daemon exit after SIGTERM: %s", r)
	}
	if n := strings.Count(d.Output.String(), "connection refused"); n != 1 {
		t.Fatalf("the connection failure was logged %d times, want once:\n%s", n, d.Output)
	}
}
