package daemon

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/syncd/syncd/ops"
	"github.com/syncd/syncd/syncer"
)

// ResyncRequest is the body of POST /resync: a source and either From (an
// RFC 3339 time) or FromStart.
type ResyncRequest struct {
	Source    string `json:"source"`
	From      string `json:"from,omitempty"`
	FromStart bool   `json:"from_start,omitempty"`
	// SkipRows allows a From after the watermark: the rows between are
	// skipped, never copied. Without it such a request is refused (400).
	SkipRows bool `json:"skip_rows,omitempty"`
}

// Reply is the body of every admin answer that is not a document.
type Reply struct {
	Message string `json:"message"`
	// Applied is false when the resync waits for the run in flight to end.
	Applied bool `json:"applied"`
}

// handler serves the admin API; local is true on the Unix socket, whose
// file mode already limits it to the daemon's user: resync needs no token
// there.
func (d *daemon) handler(local bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", d.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{Registry: d.reg}))
	mux.HandleFunc("GET /status", d.status)
	mux.HandleFunc("GET /identity", d.identity)
	mux.HandleFunc("POST /resync", func(w http.ResponseWriter, r *http.Request) { d.resync(w, r, local) })
	return mux
}

// identity proves that this process holds the state file (see
// identity.go): the client checks the proof before it sends a token or
// believes an answer.
func (d *daemon) identity(w http.ResponseWriter, r *http.Request) {
	nonce := r.URL.Query().Get("nonce")
	if len(nonce) < 32 || len(nonce) > 256 {
		reply(w, http.StatusBadRequest, Reply{Message: "give a fresh random nonce of 32 to 256 characters: GET /identity?nonce=..."})
		return
	}
	addr, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if addr == nil || d.secret == nil {
		reply(w, http.StatusInternalServerError, Reply{Message: "identity is not available"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(Identity{State: d.o.Store.Path(), PID: os.Getpid(), Proof: IdentityProof(d.secret, nonce, addr.String())})
}

// readyz is 200 when the configs are loaded, the state file is open and
// no stop has begun. A source whose last run failed (its database down, a
// missing grant) does not make the daemon unready: the other sources keep
// syncing, and a rollout or a Service has no reason to stop for it (it is
// an alert: syncd_source_failed). The body names such sources after
// "ready".
func (d *daemon) readyz(w http.ResponseWriter, _ *http.Request) {
	d.mu.Lock()
	stopping := d.stopping
	sources := make(map[string]*source, len(d.sources))
	for n, s := range d.sources {
		sources[n] = s
	}
	d.mu.Unlock()
	var problems, failing []string
	if stopping {
		problems = append(problems, "shutting down")
	}
	if len(sources) == 0 {
		problems = append(problems, "no source configured")
	}
	for name, s := range sources {
		if msg := s.failure(); msg != "" {
			failing = append(failing, fmt.Sprintf("source %s: last run failed: %s", name, msg))
		}
	}
	sort.Strings(failing)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if len(problems) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, strings.Join(append(problems, failing...), "\n"))
		return
	}
	fmt.Fprintln(w, strings.Join(append([]string{"ready"}, failing...), "\n"))
}

// status serves exactly what `syncd status --json` prints; with
// ?fleet=1, what `syncd status --fleet --json` prints (fleet).
func (d *daemon) status(w http.ResponseWriter, r *http.Request) {
	if fleet, _ := strconv.ParseBool(r.URL.Query().Get("fleet")); fleet {
		d.fleet(w, r)
		return
	}
	st, err := ops.BuildStatus(d.o.Store, d.o.Kinds, d.configs())
	st.WithRunning(d.running())
	if err == nil {
		// Every pattern source's skipped tables, those of a pattern
		// that syncs no table too.
		st.Skipped, err = ops.SkippedTables(d.o.Store, d.patternNames())
	}
	if err != nil {
		reply(w, http.StatusInternalServerError, Reply{Message: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(st)
}

// fleet serves every source of the fleet (the replicas started with the
// same configuration) as the sinks record it, from whichever replica is
// asked: the replica that claimed each copy last ("HOST pid PID"), whether
// a run holds it now, when a page last moved it, and how its last
// recorded run ended (ops.FleetSource); for the copies this replica
// claimed last, also its last run and freshness from its own state file. It answers 200 with the sinks it could not read named in
// their sources' error (as `syncd status --fleet --json` prints them).
func (d *daemon) fleet(w http.ResponseWriter, r *http.Request) {
	cfgs := d.configs()
	fl := ops.ReadFleet(r.Context(), d.o.Kinds, cfgs)
	st, err := ops.BuildStatus(d.o.Store, d.o.Kinds, cfgs)
	if err != nil {
		reply(w, http.StatusInternalServerError, Reply{Message: err.Error()})
		return
	}
	fl.WithOwn(st, syncer.WriterName())
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(fl)
}

// resync moves a source's watermark back, at once when the source is idle
// or at the end of the run in flight. It changes state, so it is off
// without an admin token and requires the token as a bearer credential.
func (d *daemon) resync(w http.ResponseWriter, r *http.Request, local bool) {
	if d.o.AdminToken == "" && !local {
		reply(w, http.StatusForbidden, Reply{Message: "resync over HTTP is off: start the daemon with SYNCD_ADMIN_TOKEN or --admin-token-file to enable it, or use its admin socket"})
		return
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !local && (!ok || subtle.ConstantTimeCompare([]byte(got), []byte(d.o.AdminToken)) != 1) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="syncd"`)
		reply(w, http.StatusUnauthorized, Reply{Message: "missing or wrong admin token: send the daemon's token (SYNCD_ADMIN_TOKEN or --admin-token-file) as Authorization: Bearer"})
		return
	}
	var req ResyncRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
		reply(w, http.StatusBadRequest, Reply{Message: fmt.Sprintf("body is not a resync request (%v); send {\"source\": NAME, \"from\": RFC3339} or {\"source\": NAME, \"from_start\": true}", err)})
		return
	}
	if (req.From == "") == !req.FromStart {
		reply(w, http.StatusBadRequest, Reply{Message: "give exactly one of from (RFC 3339) and from_start"})
		return
	}
	var from time.Time
	if req.From != "" {
		t, err := time.Parse(time.RFC3339Nano, req.From)
		if err != nil {
			reply(w, http.StatusBadRequest, Reply{Message: fmt.Sprintf("from %q is not an RFC 3339 time such as 2026-11-30T00:00:00Z", req.From)})
			return
		}
		from = t.UTC()
	}
	d.mu.Lock()
	s, ok := d.sources[req.Source]
	d.mu.Unlock()
	if !ok {
		reply(w, http.StatusNotFound, Reply{Message: fmt.Sprintf("source %q is not configured in this daemon", req.Source)})
		return
	}
	if k, err := d.o.Kinds.Of(s.config()); err == nil && k.NoResync != "" {
		reply(w, http.StatusBadRequest, Reply{Message: fmt.Sprintf("source %s %s", req.Source, k.NoResync)})
		return
	}
	if err := syncer.CheckFrom(r.Context(), s.config(), from); err != nil {
		reply(w, http.StatusBadRequest, Reply{Message: err.Error()})
		return
	}
	// A move forward skips the rows between: refused unless the request
	// says skip_rows, and counted for the message either way. The state
	// is checked again when the resync is applied (ops.ResyncMove).
	skipped := int64(-1)
	if st, _, err := d.o.Store.Get(req.Source); err == nil {
		if m := ops.PlanMove(st, from); m.Forward() {
			if n, cerr := syncer.SkippedRows(r.Context(), s.config(), st, from); cerr == nil {
				skipped = n
			}
			if !req.SkipRows {
				reply(w, http.StatusBadRequest, Reply{Message: (&ops.SkipError{Source: req.Source, Move: m, Rows: skipped}).Error()})
				return
			}
		}
	}
	m, applied, err := s.requestResync(from, req.SkipRows)
	var skipErr *ops.SkipError
	switch {
	case errors.As(err, &skipErr):
		skipErr.Rows = skipped
		reply(w, http.StatusBadRequest, Reply{Message: skipErr.Error()})
	case err != nil:
		reply(w, http.StatusInternalServerError, Reply{Message: err.Error()})
	case !applied:
		d.log.Info("resync requested over HTTP; it waits for the run in flight to end", "source", req.Source, "from", resyncText(from), "skip_rows", req.SkipRows)
		reply(w, http.StatusAccepted, Reply{Message: fmt.Sprintf("source %s: a run is going; the watermark moves to %s when it ends, and the next run reads from there", req.Source, resyncText(from))})
	default:
		msg := m.Done(req.Source, skipped)
		d.log.Info("resync applied over HTTP", "source", req.Source, "from", resyncText(from), "result", msg)
		reply(w, http.StatusOK, Reply{Message: msg, Applied: true})
	}
}

func reply(w http.ResponseWriter, code int, r Reply) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(r)
}
