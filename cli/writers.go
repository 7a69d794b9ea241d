package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/sink"

	"github.com/syncd/syncd/watermark"
)

// oneWriter refuses two table copies loaded together (from one file or
// several, plain or from patterns) that write the same sink table of the
// same place (the same sink database; what the kind's Identity names): a
// copy has exactly one writer. The error is a config error at the second
// one's sink.table, naming both.
func oneWriter(kinds *kind.Registry, cfgs []*config.Config) error {
	seen := map[string]*config.Config{}
	for _, c := range cfgs {
		k, err := kinds.Of(c)
		if err != nil || k.OpenSink == nil {
			continue
		}
		id := k.Identity(c)
		key := c.Sink.Type
		for _, name := range slices.Sorted(maps.Keys(id)) {
			key += " " + name + "=" + id[name]
		}
		key += " " + c.Sink.Ident.String()
		first, ok := seen[key]
		if !ok {
			seen[key] = c
			continue
		}
		return c.ErrorAt("sink.table", &catalog.SecondWriter{Copy: c.Sink.Ident.String(), Writer: first.Name,
			WriterFrom: fmt.Sprintf("table %s, %s:%d", first.Source.Ident, first.File, first.Lines["sink.table"]),
			Source:     c.Name, SourceFrom: fmt.Sprintf("table %s", c.Source.Ident)})
	}
	return nil
}

// sinkRecord reads the catalog's record of cfg's copy, refuses it when
// another source writes the copy, and describes it beside the state
// file's watermark for validate ("" when the copy is not recorded yet).
func sinkRecord(ctx context.Context, cfg *config.Config, src checkedSource, dst *sink.Postgres, state string) (string, error) {
	rec, found, err := catalog.Read(ctx, dst.Conn(), cfg.Sink.Ident.String())
	if err != nil || !found {
		return "", err
	}
	id, err := catalog.ReadSource(ctx, src, pgutil.Qualified(src.Table().Ident.Schema, src.Table().Ident.Name), src.Table().Ident.String())
	if err != nil {
		return "", err
	}
	if err := catalog.Refuse(rec, cfg.Name, id); err != nil {
		return "", cfg.ErrorAt("sink.table", err)
	}
	st, _, serr := watermark.ReadState(state, cfg.Name, 2*time.Second)
	if errors.Is(serr, os.ErrNotExist) {
		serr = nil
	}
	return describeRecord(rec, st, serr), nil
}

// describeRecord is the sink's record beside the state file's watermark.
func describeRecord(rec catalog.Record, st watermark.State, stateErr error) string {
	stateCur := st.Cursor
	where := "no page recorded"
	if rec.Cursor != nil {
		where = "at (" + strings.Join(rec.Cursor, ", ") + ")"
	}
	s := fmt.Sprintf("sink record: %s %s, %d pages, %d rows, last claimed by %s at %s", rec.Copy, where, rec.Pages, rec.Rows,
		rec.Writer, rec.UpdatedAt.UTC().Format("2006-01-02T15:04:05Z"))
	switch {
	case stateErr != nil:
		s += "; state file: " + oneLine(stateErr.Error())
	case stateCur == nil && !st.ResyncedAt.IsZero() && !st.ResyncedAt.Truncate(time.Microsecond).Equal(rec.ResyncedAt):
		s += "; state file: resynced at " + st.ResyncedAt.UTC().Format("2006-01-02T15:04:05Z") + " (the next run moves the sink's record with it)"
	case stateCur == nil && st.From != "":
		s += "; state file: resync from " + st.From
	case stateCur == nil:
		s += "; state file: no watermark (the next run resumes from the sink's record)"
	case strings.Join(stateCur, "\x00") == strings.Join(rec.Cursor, "\x00"):
		s += "; state file: the same"
	default:
		s += "; state file: at (" + strings.Join(stateCur, ", ") + "), which differs: the next run resumes from the sink's record"
	}
	return s
}
