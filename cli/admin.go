package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
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
	tok := env.Getenv(EnvAdminToken)
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
	fs.StringVar(&a.listen, "listen", daemon.DefaultListen, "the daemon's --listen address, used when the daemon holds the state file")
	fs.StringVar(&a.tokenFile, "admin-token-file", "", "file holding the daemon's admin token (default $SYNCD_ADMIN_TOKEN)")
}

// adminCall sends one request to the daemon's admin API and returns the
// status code and body. lockErr is why the API is used, for the message
// when no daemon answers.
func adminCall(ctx context.Context, a *adminFlags, token, method, path string, body any, lockErr error) (int, []byte, error) {
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
	url := "http://" + a.listen + path
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("--listen %q: %w: %w", a.listen, err, ErrUsage)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w; no syncd daemon answers at %s either (%v): give its address with --listen, or stop the daemon and run this again", lockErr, a.listen, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("read the answer of the daemon at %s: %w", a.listen, err)
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
