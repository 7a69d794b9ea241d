package daemon

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The admin socket is the daemon user's only from the moment bind creates
// it, whatever the process umask: observed right after the bind, before
// listenSocket's chmod, with the most permissive umask (0), it already
// has no group or other permission. (Before: 0777 minus the umask until
// the chmod, so any local user could connect in between.)
func TestAdminSocketRestrictedFromCreation(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	var atBind os.FileMode
	testAfterBind = func(path string) {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Errorf("lstat the socket right after bind: %v", err)
			return
		}
		atBind = fi.Mode()
	}
	t.Cleanup(func() { testAfterBind = nil })

	path := filepath.Join(t.TempDir(), "state.db.sock")
	ln, err := listenSocket(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if atBind.Type() != os.ModeSocket || atBind.Perm()&0o077 != 0 {
		t.Fatalf("right after bind the admin socket is %v, want a socket with no group or other permission", atBind)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket mode %v, want 0600", fi.Mode().Perm())
	}
	// The umask is the process's again.
	if now := syscall.Umask(0); now != 0 {
		t.Fatalf("umask after listenSocket is %#o, want the 0 it was before", now)
	}
	// It still serves its owner.
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("connect to the admin socket: %v", err)
	}
	c.Close()
}
