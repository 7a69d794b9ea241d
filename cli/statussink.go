package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/ops"
	"github.com/syncd/syncd/sink"
)

// addSinkRecords reads, for `status --sink`, each table copy's record in
// its sink's catalog (one connection per source, 5 s to answer), beside
// the state file's watermark. A sink that cannot be read gets the reason,
// not a failed status.
func addSinkRecords(ctx context.Context, env *Env, path string, st *ops.Status) error {
	cfgs, err := load(env, path, "")
	if err != nil {
		return err
	}
	byName := map[string]*config.Config{}
	for _, c := range cfgs {
		byName[c.Name] = c
	}
	for i := range st.Sources {
		s := &st.Sources[i]
		c := byName[s.Name]
		if c == nil {
			// A table of a pattern source: NAME.TABLE.
			for _, p := range cfgs {
				if p.IsPattern() && strings.HasPrefix(s.Name, p.Name+".") {
					c = p.Named(config.Table{Schema: p.Source.Ident.Schema, Name: strings.TrimPrefix(s.Name, p.Name+".")})
				}
			}
		}
		if c == nil || c.IsPattern() {
			continue
		}
		if k, err := env.Kinds.Of(c); err != nil || !k.Catalog {
			continue
		}
		s.SinkRecord = readSinkRecord(ctx, c, s.Cursor)
	}
	return nil
}

func readSinkRecord(ctx context.Context, c *config.Config, stateCursor []string) *ops.SinkRecord {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := sink.Connect(ctx, c)
	if err != nil {
		return &ops.SinkRecord{Error: oneLine(err.Error())}
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rec, found, err := catalog.Read(ctx, conn, c.Sink.Ident.String())
	if err != nil {
		return &ops.SinkRecord{Error: oneLine(err.Error())}
	}
	if !found {
		return &ops.SinkRecord{}
	}
	return &ops.SinkRecord{Found: true, Source: rec.SourceName, From: rec.Source.String(), Cursor: rec.Cursor, Pages: rec.Pages, Rows: rec.Rows,
		Writer: rec.Writer, StateFile: rec.StateFile, UpdatedAt: ops.TimeText(rec.UpdatedAt), SameAsStateFile: slices.Equal(rec.Cursor, stateCursor)}
}

// printSinkRecord writes the line of `status --sink` under a source.
func printSinkRecord(env *Env, s ops.SourceStatus) {
	r := s.SinkRecord
	switch {
	case r == nil:
		return
	case r.Error != "":
		fmt.Fprintf(env.Stdout, "%s: sink record: could not be read: %s\n", s.Name, r.Error)
	case !r.Found:
		fmt.Fprintf(env.Stdout, "%s: sink record: none yet (the next run registers the copy %s)\n", s.Name, s.Sink)
	default:
		where := "no page recorded"
		if r.Cursor != nil {
			where = "at (" + strings.Join(r.Cursor, ", ") + ")"
		}
		state := "the same as the state file"
		if !r.SameAsStateFile {
			state = "differs from the state file: the next run resumes from the sink's record"
			if s.ResyncFrom != "" {
				state = "the state file holds a resync, which the next run records in the sink"
			}
		}
		if r.Source != s.Name {
			state = fmt.Sprintf("written by source %s, not by this one: its runs are refused", r.Source)
		}
		fmt.Fprintf(env.Stdout, "%s: sink record: %s %s, %d pages, %d rows, by %s at %s; %s\n", s.Name, s.Sink, where, r.Pages, r.Rows, r.Writer, r.UpdatedAt, state)
	}
}
