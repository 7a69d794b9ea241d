package ops

import (
	"errors"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

// Resync moves the watermark of source c back to from (the zero time: the
// start) and records c's settings as the ones the watermark now belongs
// to. A stored state that no longer decodes is replaced: resync is the
// recovery its error message names.
func Resync(store *watermark.Store, c *config.Config, from time.Time) error {
	if k, err := kind.Of(c); err != nil {
		return err
	} else if k.NoResync != "" {
		return c.Errorf("sink.type", "source %s %s", c.Name, k.NoResync)
	}
	name := c.Name
	id := syncer.IdentityOf(c)
	reset := func(st *watermark.State) {
		st.Identity = &id
		st.Cursor = nil
		st.From = ""
		st.FirstLoad = nil // a first load under way is not resumed: the copy is re-read
		st.ResyncedFrom = "start"
		if !from.IsZero() {
			st.From = from.Format("2006-01-02T15:04:05.999999Z07:00")
			st.ResyncedFrom = st.From
		}
		st.ResyncedAt = time.Now().UTC()
	}
	err := store.Update(name, func(st *watermark.State) error {
		reset(st)
		return nil
	})
	if errors.Is(err, watermark.ErrCorrupt) {
		var st watermark.State
		reset(&st)
		return store.Replace(name, st)
	}
	return err
}
