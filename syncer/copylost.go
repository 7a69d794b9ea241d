package syncer

import (
	"context"
	"fmt"
	"github.com/syncd/syncd/internal/sourceerr"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/watermark"
)

// checkCopyNotLost refuses to resume from a watermark when the copy it
// was computed for is gone: the sink table is missing or empty although
// rows were applied, and no soft delete can have removed them (without
// source.deleted_column syncd never deletes from the copy). Someone
// dropped or emptied it, or the sink now points elsewhere; resuming would
// copy only the rows after the watermark and say "ok". The error is a
// config error (exit 2) with the resync that rebuilds the copy. held is
// true when the check ran and found a row in the copy. holds, when set,
// is whether the copy held a row when this run read it, on conn under the
// run lock, with other statements (copyFingerprint): a copy that exists
// (else that read failed and holds is nil), so the check asks nothing.
func checkCopyNotLost(ctx context.Context, conn *pgx.Conn, c *config.Config, st watermark.State, statePath string, holds *bool) (held bool, err error) {
	if conn == nil || !checksCopy(c, st) {
		return false, nil
	}
	t := c.Sink.Ident
	var state string
	switch {
	case holds == nil:
		state, err = copyState(ctx, conn, c)
	case !*holds:
		state = "empty"
	}
	if err != nil || state == "" {
		return err == nil, err
	}
	return false, c.ErrorAt("sink.table", &sourceerr.ResyncNeeded{Source: c.Name, Alt: "(or --from TIME to keep only newer rows)",
		Reason: fmt.Sprintf("the copy %s is %s, but the watermark of source %s in %s is at (%s) after %d rows were applied: the copy was dropped or emptied (or the sink is another database), and resuming would copy only the rows after the watermark; to rebuild it ",
			t, state, c.Name, statePath, strings.Join(st.Cursor, ", "), st.TotalRows)})
}

// checksCopy reports whether checkCopyNotLost looks into the copy: a
// watermark after rows applied, and no soft delete that could have
// emptied it.
func checksCopy(c *config.Config, st watermark.State) bool {
	return st.Cursor != nil && st.TotalRows > 0 && c.Source.DeletedColumn == ""
}
