package testutil

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// FreeAddr returns a loopback address with a port nobody listened on a
// moment ago, for a process under test to listen on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// WriteFile writes content to dir/name (mode 0600) and returns its path.
func WriteFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
	return p
}
