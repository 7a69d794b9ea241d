package daemon

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// The admin channel. The daemon serves its admin API on a Unix socket
// beside the state file (SocketPath), mode 0600: only its own user (and
// root) can connect, so the socket needs no token. The TCP listener serves
// the same API, the state-changing part only with the admin token.
//
// A client must not send the token to, or believe, a process it has not
// verified. At start the daemon, which holds the state file's lock, writes
// a fresh random secret to IdentityPath (mode 0600). GET /identity?nonce=N
// answers HMAC-SHA256(secret, N and the address the request came in on):
// only the process that holds the state file knows the secret, the client's
// fresh nonce rules out replay, and the address rules out a process that
// relays the challenge to the real daemon from another address.

// SocketPath is the admin socket of the daemon holding the state file.
func SocketPath(state string) string { return state + ".sock" }

// IdentityPath is the file holding the identity secret of the daemon
// holding the state file.
func IdentityPath(state string) string { return state + ".id" }

// Identity is the body of GET /identity.
type Identity struct {
	State string `json:"state"`
	PID   int    `json:"pid"`
	// Proof is IdentityProof(secret, nonce, the address the request came in on).
	Proof string `json:"proof"`
}

// IdentityProof is the hex HMAC that proves knowledge of secret for a
// nonce received on addr (host:port of a TCP listener, or a socket path).
func IdentityProof(secret []byte, nonce, addr string) string {
	h := hmac.New(sha256.New, secret)
	fmt.Fprintf(h, "syncd admin identity\x00%s\x00%s", nonce, addr)
	return hex.EncodeToString(h.Sum(nil))
}

// writeIdentity makes a new secret and writes it (0600) beside the state.
func writeIdentity(state string) ([]byte, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	path := IdentityPath(state)
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("write the daemon identity %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600.
	if _, err := tmp.WriteString(hex.EncodeToString(secret) + "\n"); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write the daemon identity %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("write the daemon identity %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return nil, fmt.Errorf("write the daemon identity %s: %w", path, err)
	}
	return secret, nil
}

// listenSocket binds the admin socket at path, mode 0600 from the moment
// it exists (listenRestricted). The caller holds
// the state file's lock, so no live daemon of this state owns a socket at
// path: a leftover socket nobody answers on is removed; anything else (a
// file that is not a socket, a socket someone answers on) is left alone
// and reported.
func listenSocket(path string) (net.Listener, error) {
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode().Type() != fs.ModeSocket:
		return nil, fmt.Errorf("admin socket %s: a file that is not a socket is in the way; move it", path)
	case err == nil:
		c, derr := net.DialTimeout("unix", path, time.Second)
		if derr == nil {
			c.Close()
			return nil, fmt.Errorf("admin socket %s: another process answers on it although this daemon holds the state file; stop that process or remove the socket", path)
		}
		if !errors.Is(derr, syscall.ECONNREFUSED) && !errors.Is(derr, syscall.ENOENT) {
			return nil, fmt.Errorf("admin socket %s: %w", path, derr)
		}
		if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return nil, fmt.Errorf("remove the stale admin socket %s: %w", path, rerr)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	ln, err := listenRestricted(path)
	if err != nil {
		return nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if testAfterBind != nil {
		testAfterBind(path)
	}
	// The socket was created 0700 (see listenRestricted); 0600 is the mode
	// the docs promise (execute means nothing on a socket).
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	return ln, nil
}

// umaskMu serialises the daemon's changes of the process umask.
var umaskMu sync.Mutex

// testAfterBind, set only by tests, is called with the socket's path as
// soon as bind has created it, before anything else touches it.
var testAfterBind func(path string)

// listenRestricted binds a Unix socket at path that only the daemon's user
// can connect to from the moment it exists: bind creates the socket file
// with mode 0777 minus the umask, so the umask is 077 during the bind.
// (Binding first and restricting it afterwards left a moment in which any
// local user could connect.) The umask belongs to the process: a file or
// directory another goroutine creates during the bind gets no group or
// other permissions, which is never less safe and is undone right after.
func listenRestricted(path string) (*net.UnixListener, error) {
	umaskMu.Lock()
	defer umaskMu.Unlock()
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	return net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
}
