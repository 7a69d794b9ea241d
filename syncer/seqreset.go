package syncer

import (
	"fmt"
	"strconv"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/sourceerr"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// CheckSequence refuses to resume a sequence cursor whose sequence was set
// back below the watermark (setval, ALTER SEQUENCE ... RESTART, a
// sequence replaced by a new one): rows inserted since get values at or
// below the watermark, which no page reads again, and the bound, capped at
// the sequence's last value, already lies below the watermark, so every
// run would end "caught up" having read nothing. b is the run's bound (its
// SeqLast is the sequence's last value, read with the bound); nothing is
// checked when the cursor is a timestamp, the last value is unknown, or
// there is no watermark.
func CheckSequence(c *config.Config, t *source.Table, st watermark.State, b source.Bound) error {
	if t.Temporal || b.SeqLast == "" || len(st.Cursor) == 0 {
		return nil
	}
	last, err := strconv.ParseInt(b.SeqLast, 10, 64)
	if err != nil {
		return nil
	}
	mark, err := strconv.ParseInt(st.Cursor[0], 10, 64)
	if err != nil || last >= mark {
		return nil
	}
	col := t.Cursor[0].Name
	return c.ErrorAt("source.cursor", &sourceerr.ResyncNeeded{Source: c.Name,
		Reason: fmt.Sprintf("sequence %s of %s was set back below the watermark: its last value is %d but the watermark is at %s %d, so rows inserted since get %s values at or below the watermark and every run would skip them; nothing was read: ",
			t.SeqName, t.Ident, last, col, mark, col),
		Alt: fmt.Sprintf("to copy the table again, or move the sequence back above the watermark with SELECT setval('%s', %d) and copy the rows inserted since it was set back with `syncd reconcile --source %s --repair`",
			t.SeqName, mark, c.Name),
	})
}
