package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Cluster is a throwaway PostgreSQL cluster made with initdb and driven with
// pg_ctl. Tests use it when no server answers, and fault tests use it to stop
// and start a server under a running sync.
type Cluster struct {
	Dir  string
	Port int
	// runAs is the OS user that owns the cluster ("" for the current user);
	// PostgreSQL refuses to run as root, so root runs it as "postgres".
	runAs string
}

// StartCluster initialises a cluster in a new temporary folder and starts it
// on a free loopback port. Each of settings is one more postgresql.conf line
// (for example "max_prepared_transactions = 10"). The caller must call
// Destroy.
func StartCluster(ctx context.Context, settings ...string) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "syncd-pg-")
	if err != nil {
		return nil, fmt.Errorf("make cluster folder: %w", err)
	}
	c := &Cluster{Dir: dir}
	if os.Geteuid() == 0 {
		c.runAs = "postgres"
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs an OS user \"postgres\" to own the throwaway cluster: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, fmt.Errorf("chown %s: %w", dir, err)
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c.Port = port
	data := filepath.Join(dir, "data")
	if out, err := c.command(ctx, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	conf := fmt.Sprintf("\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nfsync = off\nmax_connections = 200\n", port, dir)
	for _, line := range settings {
		conf += line + "\n"
	}
	f, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open postgresql.conf: %w", err)
	}
	_, werr := f.WriteString(conf)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, fmt.Errorf("write postgresql.conf: %w", werr)
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// URL is the connection string of the cluster's postgres database.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.Port)
}

// Start starts the server and waits until it accepts connections.
func (c *Cluster) Start(ctx context.Context) error {
	data := filepath.Join(c.Dir, "data")
	logf := filepath.Join(c.Dir, "server.log")
	if out, err := c.command(ctx, "pg_ctl", "-D", data, "-l", logf, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl start: %w: %s", err, out)
	}
	return nil
}

// Stop stops the server with the given pg_ctl mode ("fast" or "immediate").
func (c *Cluster) Stop(ctx context.Context, mode string) error {
	data := filepath.Join(c.Dir, "data")
	if out, err := c.command(ctx, "pg_ctl", "-D", data, "-m", mode, "-w", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop: %w: %s", err, out)
	}
	return nil
}

// SetHBA replaces the cluster's pg_hba.conf with lines and restarts the
// server, so that the next connection meets them (fault tests use it to
// require a password).
func (c *Cluster) SetHBA(ctx context.Context, lines ...string) error {
	data := filepath.Join(c.Dir, "data")
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("write pg_hba.conf: %w", err)
	}
	if err := c.Stop(ctx, "fast"); err != nil {
		return err
	}
	return c.Start(ctx)
}

// Destroy stops the server and removes its folder.
func (c *Cluster) Destroy(ctx context.Context) {
	_ = c.Stop(ctx, "immediate")
	_ = os.RemoveAll(c.Dir)
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	bin := pgBinary(name)
	if c.runAs != "" {
		args = append([]string{"-u", c.runAs, "--", bin}, args...)
		return exec.CommandContext(ctx, "runuser", args...)
	}
	return exec.CommandContext(ctx, bin, args...)
}

// pgBinary finds a PostgreSQL server program on PATH or in Debian's folder.
func pgBinary(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) > 0 {
		return matches[len(matches)-1]
	}
	return name
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// answers reports whether a PostgreSQL server accepts TCP connections at url's host.
func answers(url string) bool {
	host := "127.0.0.1:5432"
	if i := strings.Index(url, "@"); i >= 0 {
		rest := url[i+1:]
		if j := strings.IndexAny(rest, "/?"); j >= 0 {
			rest = rest[:j]
		}
		if rest != "" {
			host = rest
		}
	}
	if !strings.Contains(host, ":") {
		host += ":5432"
	}
	conn, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}
