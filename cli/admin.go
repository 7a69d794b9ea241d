package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/watermark"
)

// EnvAdminToken names the variable holding the admin token.
const EnvAdminToken = "SYNCD_ADMIN_TOKEN"

// adminToken reads the admin token from file, else from $SYNCD_ADMIN_TOKEN,
// and registers it for scrubbing.
func adminToken(env *Env, file string) (string, error) {
	tok := env.getenv(EnvAdminToken)
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--admin-token-file: %w: %w", err, ErrUsage)
		}
		tok = strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("--admin-token-file %s is empty; write the token in it: %w", file, ErrUsage)
		}
	}
	env.scrub.add(tok)
	return tok, nil
}

// adminFlags are the flags of the commands that fall back on the daemon's
// admin API when the daemon holds the state file.
type adminFlags struct {
	listen    string
	tokenFile string
}

func (a *adminFlags) register(fs interface {
	StringVar(*string, string, string, string)
}) {
	fs.StringVar(&a.listen, "listen", "", "reach the daemon over TCP at this address (its --listen) instead of its admin socket STATE.sock; it must prove it holds the state file before the admin token is sent")
	fs.StringVar(&a.tokenFile, "admin-token-file", "", "file holding the daemon's admin token, sent over TCP only (default $SYNCD_ADMIN_TOKEN)")
}

// adminClient talks to the daemon that holds a state file: over its admin
// socket by default, over TCP when --listen is given. It sends nothing
// that matters, and believes nothing, before the daemon has proved that it
// holds the state file (daemon.Identity).
type adminClient struct {
	state  string // absolute path of the state file
	where  string // for messages: the socket path or the TCP address
	tcp    bool
	token  string // sent over TCP only, once verified
	http   *http.Client
	base   string
	lockE  error // why the daemon is asked: the state file is locked
	proved bool
}

func newAdminClient(a *adminFlags, state, token string, lockErr error) (*adminClient, error) {
	abs, err := filepath.Abs(state)
	if err != nil {
		return nil, fmt.Errorf("--state %s: %w", state, err)
	}
	c := &adminClient{state: abs, token: token, lockE: lockErr}
	if a.listen != "" {
		c.tcp, c.where, c.base = true, a.listen, "http://"+a.listen
		c.http = &http.Client{}
		return c, nil
	}
	sock := daemon.SocketPath(abs)
	c.where, c.base = sock, "http://syncd"
	c.http = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	return c, nil
}

// verify checks that the daemon at c.where holds c.state: it answers a
// fresh nonce with the proof only the holder of the state file can make,
// bound to the address this client reached.
func (c *adminClient) verify(ctx context.Context) error {
	if c.proved {
		return nil
	}
	raw, err := os.ReadFile(daemon.IdentityPath(c.state))
	if err != nil {
		return fmt.Errorf("%w; cannot read the daemon's identity %s to verify the process at %s (%v): run this as the daemon's user", c.lockE, daemon.IdentityPath(c.state), c.where, errors.Unwrap(err))
	}
	secret, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil || len(secret) == 0 {
		return fmt.Errorf("%w; the daemon's identity %s is unreadable: restart the daemon", c.lockE, daemon.IdentityPath(c.state))
	}
	nb := make([]byte, 32)
	if _, err := rand.Read(nb); err != nil {
		return err
	}
	nonce := hex.EncodeToString(nb)
	var reached string
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		reached = i.Conn.RemoteAddr().String()
	}}
	code, body, err := c.do(httptrace.WithClientTrace(ctx, trace), "GET", "/identity?nonce="+nonce, nil, false)
	if err != nil {
		return err
	}
	var id daemon.Identity
	if code != 200 || json.Unmarshal(body, &id) != nil {
		return fmt.Errorf("%w; the process at %s is not the syncd daemon holding %s (it answered GET /identity with %d); nothing was sent to it: stop it, or give the daemon's address with --listen", c.lockE, c.where, c.state, code)
	}
	if id.State != c.state {
		return fmt.Errorf("%w; the daemon at %s holds another state file (%s): give the --listen address of the daemon that holds %s", c.lockE, c.where, id.State, c.state)
	}
	if !c.tcp {
		reached = daemon.SocketPath(c.state)
	}
	want := daemon.IdentityProof(secret, nonce, reached)
	if subtle.ConstantTimeCompare([]byte(id.Proof), []byte(want)) != 1 {
		return fmt.Errorf("%w; the process at %s claims to hold %s but cannot prove it; nothing was sent to it: it is not the daemon holding the state file (another process on that address?)", c.lockE, c.where, c.state)
	}
	c.proved = true
	return nil
}

// call verifies the daemon, then sends one request and returns the status
// code and body.
func (c *adminClient) call(ctx context.Context, method, path string, body any) (int, []byte, error) {
	if err := c.verify(ctx); err != nil {
		return 0, nil, err
	}
	return c.do(ctx, method, path, body, c.tcp && c.token != "")
}

func (c *adminClient) do(ctx context.Context, method, path string, body any, withToken bool) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("--listen %q: %w: %w", c.where, err, ErrUsage)
	}
	if withToken {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		hint := "give its address with --listen, or stop the daemon and run this again"
		if !c.tcp {
			hint = "is it a syncd daemon of this version? give its address with --listen, or stop it and run this again"
		}
		return 0, nil, fmt.Errorf("%w; no syncd daemon answers at %s either (%v): %s", c.lockE, c.where, errors.Unwrap(err), hint)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("read the answer of the daemon at %s: %w", c.where, err)
	}
	return resp.StatusCode, out, nil
}

// apiMessage is the message of an admin API reply.
func apiMessage(body []byte) string {
	var r daemon.Reply
	if json.Unmarshal(body, &r) == nil && r.Message != "" {
		return r.Message
	}
	return strings.TrimSpace(string(body))
}

// isLocked reports an error of opening a state file that a daemon holds.
func isLocked(err error) bool { return errors.Is(err, watermark.ErrLocked) }
