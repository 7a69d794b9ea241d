package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/ops"
	"github.com/syncd/syncd/syncer"
)

func cmdResync(ctx context.Context, env *Env, args []string) error {
	fs := flagSet(env, "resync")
	var c common
	c.register(fs, true)
	name := fs.String("source", "", "the source to move back (required)")
	from := fs.String("from", "", "re-read rows whose first cursor column is at or after this RFC 3339 time")
	fromStart := fs.Bool("from-start", false, "re-read the whole source")
	skipRows := fs.Bool("skip-rows", false, "allow --from after the watermark: the rows between are skipped, never copied")
	var a adminFlags
	a.register(fs)
	if err := parse(env, fs, args, &c); err != nil {
		return err
	}
	if *name == "" {
		return fmt.Errorf("--source is required: %w", ErrUsage)
	}
	if (*from == "") == !*fromStart {
		return fmt.Errorf("give exactly one of --from RFC3339 and --from-start: %w", ErrUsage)
	}
	var fromTime time.Time
	if *from != "" {
		t, err := time.Parse(time.RFC3339Nano, *from)
		if err != nil {
			return fmt.Errorf("--from %q is not an RFC 3339 time such as 2026-11-30T00:00:00Z: %w", *from, ErrUsage)
		}
		fromTime = t.UTC()
	}
	cfg, err := loadOne(ctx, env, c.config, *name, true)
	if err != nil {
		return err
	}
	k, err := env.Kinds.Of(cfg)
	if err != nil {
		return err
	}
	if k.NoResync != "" {
		return cfg.Errorf("sink.type", "source %s %s", cfg.Name, k.NoResync)
	}
	if err := syncer.CheckFrom(ctx, cfg, fromTime); err != nil {
		return err
	}
	store, err := openState(c.state)
	if isLocked(err) {
		return resyncThroughDaemon(ctx, env, &a, c.state, daemon.ResyncRequest{Source: *name, From: *from, FromStart: *fromStart, SkipRows: *skipRows}, err)
	}
	if err != nil {
		return err
	}
	defer store.Close()
	// A move forward skips the rows between: count them for the message
	// (refused, or applied with --skip-rows). This process holds the state
	// file, so the watermark cannot move until ResyncMove, which checks
	// again.
	skipped := int64(-1)
	if st, _, gerr := store.Get(*name); gerr == nil {
		if m := ops.PlanMove(st, fromTime); m.Forward() {
			if n, cerr := syncer.SkippedRows(ctx, cfg, st, fromTime); cerr == nil {
				skipped = n
			}
			if !*skipRows {
				return &ops.SkipError{Source: *name, Move: m, Rows: skipped}
			}
		}
	}
	m, err := ops.ResyncMove(store, env.Kinds, cfg, fromTime, *skipRows)
	if err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, m.Done(*name, skipped))
	return nil
}

// resyncThroughDaemon asks the daemon that holds the state file to resync;
// a run in flight finishes its page first.
func resyncThroughDaemon(ctx context.Context, env *Env, a *adminFlags, state string, req daemon.ResyncRequest, lockErr error) error {
	token, err := adminToken(env, a.tokenFile)
	if err != nil {
		return err
	}
	c, err := newAdminClient(a, state, token, lockErr)
	if err != nil {
		return err
	}
	code, body, err := c.call(ctx, "POST", "/resync", req)
	if err != nil {
		return err
	}
	msg := apiMessage(body)
	switch code {
	case 200, 202:
		fmt.Fprintln(env.Stdout, msg)
		return nil
	case 400:
		// The daemon refused the request itself (a time past the clock, a
		// move forward without --skip-rows): a bad argument, exit 2.
		return usageText(msg)
	case 401:
		return fmt.Errorf("the daemon at %s refused the admin token: set SYNCD_ADMIN_TOKEN (or --admin-token-file) to the daemon's token, or leave out --listen to use its admin socket", c.where)
	case 403:
		return fmt.Errorf("the daemon at %s holds the state file and its resync endpoint over TCP is off: leave out --listen to use its admin socket, or restart it with SYNCD_ADMIN_TOKEN or --admin-token-file", c.where)
	}
	return fmt.Errorf("the daemon at %s answered %d: %s", c.where, code, msg)
}

// usageText is a one-line message that is a bad argument (exit 2) without
// saying so in its text.
type usageText string

func (e usageText) Error() string { return string(e) }
func (e usageText) Unwrap() error { return ErrUsage }
