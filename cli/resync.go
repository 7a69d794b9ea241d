package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/syncd/syncd/watermark"
)

func cmdResync(_ context.Context, env *Env, args []string) error {
	fs := flagSet(env, "resync")
	var c common
	c.register(fs, true)
	name := fs.String("source", "", "the source to move back (required)")
	from := fs.String("from", "", "re-read rows whose first cursor column is at or after this RFC 3339 time")
	fromStart := fs.Bool("from-start", false, "re-read the whole source")
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
	if _, err := load(env, c.config, *name); err != nil {
		return err
	}
	store, err := openState(c.state)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := Resync(store, *name, fromTime); err != nil {
		return err
	}
	if fromTime.IsZero() {
		fmt.Fprintf(env.Stdout, "source %s: watermark cleared; the next run re-reads the whole source\n", *name)
	} else {
		fmt.Fprintf(env.Stdout, "source %s: watermark moved back to %s; the next run re-reads from there\n", *name, timeText(fromTime))
	}
	return nil
}

// Resync moves the watermark of name back to from (the zero time: the start).
func Resync(store *watermark.Store, name string, from time.Time) error {
	return store.Update(name, func(st *watermark.State) error {
		st.Cursor = nil
		st.From = ""
		st.ResyncedFrom = "start"
		if !from.IsZero() {
			st.From = from.Format("2006-01-02T15:04:05.999999Z07:00")
			st.ResyncedFrom = st.From
		}
		st.ResyncedAt = time.Now().UTC()
		return nil
	})
}
