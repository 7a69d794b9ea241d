package ops

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/runlock"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/syncer"
)

// FleetStatus is what `syncd status --fleet --json` prints: every copy of
// the configured sources as the sink databases record it, whichever
// process (replica) ran it, read from the sinks and not from a state file.
type FleetStatus struct {
	// Replica is the process that answered, as the sinks' records name
	// writers ("HOST pid PID"): set by the daemon's GET /status?fleet=1.
	Replica string        `json:"replica,omitempty"`
	Sources []FleetSource `json:"sources"`
}

// FleetSource is one copy in the fleet status: the source that writes it,
// the process that last claimed it (Writer, "HOST pid PID") and whether a
// run of it holds the source's run lock now, the cursor of the last page
// applied, and when the record last moved, by the sink's clock.
type FleetSource struct {
	Name string `json:"name"`
	Sink string `json:"sink"`
	// Error says why the sink's record could not be read; Found is false
	// when the copy has no record yet (no run has claimed it).
	Error     string   `json:"error,omitempty"`
	Found     bool     `json:"found"`
	Writer    string   `json:"writer,omitempty"`
	StateFile string   `json:"state_file,omitempty"`
	Running   bool     `json:"running"`
	Cursor    []string `json:"cursor,omitempty"`
	Pages     int64    `json:"pages"`
	Rows      int64    `json:"rows"`
	UpdatedAt string   `json:"updated_at,omitempty"`
	// SinceUpdateSeconds is the sink's now() minus UpdatedAt: how long ago
	// a page (or a claim by another process) last moved the record.
	SinceUpdateSeconds *float64 `json:"since_update_seconds,omitempty"`
	// The last run and the freshness (now minus the point up to which the
	// copy was last known to hold every source row), from the answering
	// daemon's own state file: set by GET /status?fleet=1 for the copies
	// that daemon claimed last (Writer is Replica). Every copy's last
	// run, whichever replica ran it, is in the Run fields below.
	LastRunAt        string   `json:"last_run_at,omitempty"`
	LastStatus       string   `json:"last_status,omitempty"`
	FreshnessSeconds *float64 `json:"freshness_seconds,omitempty"`
	// How the copy's last recorded run ended, from the sink's record, the
	// same from every replica whichever ran it (package catalog, Run): a
	// run records its end with its last page, or, when idle, at most once
	// per RecordEverySeconds. RunAt is when it ended and SinceRunSeconds
	// how long ago, by the sink's clock; RunBound the read bound it
	// reached; RunCaughtUp whether it read every committed row below it.
	RunAt           string   `json:"run_at,omitempty"`
	SinceRunSeconds *float64 `json:"since_run_seconds,omitempty"`
	RunBound        string   `json:"run_bound,omitempty"`
	RunCaughtUp     *bool    `json:"run_caught_up,omitempty"`
	// CaughtUp is the point up to which the copy holds every committed
	// source row, by the last recorded run that caught up; LagSeconds is
	// the sink's clock minus it: how far behind the source the copy is
	// known to be (at most RecordEverySeconds more than the writer's own
	// freshness).
	CaughtUp   string   `json:"caught_up,omitempty"`
	LagSeconds *float64 `json:"lag_seconds,omitempty"`
	// RecordEverySeconds is how often, at most, the writer records an
	// idle run (the recorded one, else what this syncd would use for the
	// source's schedule). Stale is set when nothing moved the record (no
	// run's end, no page) for StaleAfterSeconds, three of those: the
	// writer has stopped, or lost its way to the sink, or one run has been
	// going that long (a first load records nothing until it ends).
	RecordEverySeconds float64 `json:"record_every_seconds,omitempty"`
	StaleAfterSeconds  float64 `json:"stale_after_seconds,omitempty"`
	Stale              bool    `json:"stale"`
}

// StaleAfter is how many recording intervals of a copy's record may pass
// without a run's end or a page before the fleet status calls it stale.
const StaleAfter = 3

// WithOwn sets Replica to me and fills the last run and the freshness of
// the copies me claimed last from st, the status of me's own state file.
func (f *FleetStatus) WithOwn(st Status, me string) {
	f.Replica = me
	own := make(map[string]SourceStatus, len(st.Sources))
	for _, s := range st.Sources {
		own[s.Name] = s
	}
	for i := range f.Sources {
		s := &f.Sources[i]
		o, ok := own[s.Name]
		if !ok || !s.Found || s.Writer != me {
			continue
		}
		s.LastRunAt, s.LastStatus, s.FreshnessSeconds = o.LastRunAt, o.LastStatus, o.FreshnessSeconds
	}
}

// ReadFleet reads the fleet status from the sinks of cfgs: one
// connection per sink database, 10 s to answer.
func ReadFleet(ctx context.Context, kinds *kind.Registry, cfgs []*config.Config) FleetStatus {
	// The sources by sink database, each read in one query.
	bySink := map[string][]*config.Config{}
	var order []string
	for _, c := range cfgs {
		if k, err := kinds.Of(c); err != nil || !k.Catalog {
			continue // a sink without a database of its own: no record
		}
		if _, ok := bySink[c.Sink.DSN]; !ok {
			order = append(order, c.Sink.DSN)
		}
		bySink[c.Sink.DSN] = append(bySink[c.Sink.DSN], c)
	}
	out := FleetStatus{Sources: []FleetSource{}}
	for _, dsn := range order {
		out.Sources = append(out.Sources, readFleet(ctx, bySink[dsn])...)
	}
	sort.Slice(out.Sources, func(i, j int) bool { return out.Sources[i].Name < out.Sources[j].Name })
	return out
}

// readFleet reads the records of the copies that cfgs (all on one sink
// database) write: a source's own copy, and every copy recorded for a
// table of a pattern source (NAME.TABLE).
func readFleet(ctx context.Context, cfgs []*config.Config) []FleetSource {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	failed := func(err error) []FleetSource {
		var out []FleetSource
		for _, c := range cfgs {
			out = append(out, FleetSource{Name: c.Name, Sink: c.Sink.Table, Error: strings.Join(strings.Fields(err.Error()), " ")})
		}
		return out
	}
	conn, err := sink.Connect(ctx, cfgs[0])
	if err != nil {
		return failed(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	recs, err := fleetRecords(ctx, conn)
	if err != nil {
		return failed(err)
	}
	var out []FleetSource
	for _, c := range cfgs {
		found := false
		for _, r := range recs {
			if r.Name == c.Name && r.Sink == c.Sink.Ident.String() || c.IsPattern() && strings.HasPrefix(r.Name, c.Name+".") {
				out = append(out, withStale(r, c))
				found = true
			}
		}
		if !found {
			out = append(out, FleetSource{Name: c.Name, Sink: c.Sink.Table})
		}
	}
	return out
}

// fleetRecords reads every record of the sink's catalog (none when there
// is no catalog yet), with whether the copy's run lock is held now.
func fleetRecords(ctx context.Context, conn *pgx.Conn) ([]FleetSource, error) {
	recs, err := catalog.List(ctx, conn)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	out := make([]FleetSource, 0, len(recs))
	keys := make([]string, 0, len(recs))
	for _, r := range recs {
		out = append(out, fleetSource(r))
		keys = append(keys, runlock.Key(runlock.Target{Source: r.SourceName, Writes: r.Copy}))
	}
	// Running: a session holds the copy's run lock now (runlock).
	lockRows, err := conn.Query(ctx, `
SELECT EXISTS (SELECT 1 FROM pg_locks l
               WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                 AND l.classid::bigint = (hashtextextended(k, 0) >> 32) & 4294967295
                 AND l.objid::bigint = hashtextextended(k, 0) & 4294967295)
FROM unnest($1::text[]) WITH ORDINALITY AS u(k, n) ORDER BY n`, keys)
	var held []bool
	if err == nil {
		held, err = pgx.CollectRows(lockRows, pgx.RowTo[bool])
	}
	if err != nil {
		return nil, fmt.Errorf("read the run locks held in the sink: %w", err)
	}
	for i := range out {
		out[i].Running = i < len(held) && held[i]
	}
	return out, nil
}

// fleetSource is a catalog record in the fleet status, its ages measured
// by the sink's clock when it was read.
func fleetSource(r catalog.Record) FleetSource {
	since := func(t time.Time) *float64 {
		s := r.ReadAt.Sub(t).Round(time.Millisecond).Seconds()
		return &s
	}
	f := FleetSource{Name: r.SourceName, Sink: r.Copy, Found: true, Writer: r.Writer, StateFile: r.StateFile,
		Cursor: r.Cursor, Pages: r.Pages, Rows: r.Rows, UpdatedAt: TimeText(r.UpdatedAt), SinceUpdateSeconds: since(r.UpdatedAt)}
	run := r.Run
	if !run.At.IsZero() {
		caught := run.CaughtUp
		f.RunAt, f.SinceRunSeconds, f.RunCaughtUp = TimeText(run.At), since(run.At), &caught
		f.RunBound = TimeText(run.Bound)
		f.RecordEverySeconds = run.Every.Seconds()
	}
	if !run.Fresh.IsZero() {
		f.CaughtUp, f.LagSeconds = TimeText(run.Fresh), since(run.Fresh)
	}
	return f
}

// withStale sets how often the copy's record is written (the writer's
// interval, else this syncd's for c's schedule) and whether it is stale:
// neither a run's end nor a page moved it for StaleAfter intervals.
func withStale(f FleetSource, c *config.Config) FleetSource {
	if f.RecordEverySeconds == 0 {
		f.RecordEverySeconds = syncer.RecordEvery(0, c).Seconds()
	}
	f.StaleAfterSeconds = StaleAfter * f.RecordEverySeconds
	age := f.SinceUpdateSeconds
	if f.SinceRunSeconds != nil && (age == nil || *f.SinceRunSeconds < *age) {
		age = f.SinceRunSeconds
	}
	f.Stale = age != nil && *age > f.StaleAfterSeconds
	return f
}
