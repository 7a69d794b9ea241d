package syncer

import (
	"context"
	"fmt"
	"github.com/syncd/syncd/internal/sourceerr"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/watermark"
)

// checkCopyNotLost refuses to resume from a watermark when the copy it
// was computed for is gone: the sink table is missing or empty although
// rows were applied, and no soft delete can have removed them (without
// source.deleted_column syncd never deletes from the copy). Someone
// dropped or emptied it, or the sink now points elsewhere; resuming would
// copy only the rows after the watermark and say "ok". The error is a
// config error (exit 2) with the resync that rebuilds the copy.
func checkCopyNotLost(ctx context.Context, conn *pgx.Conn, c *config.Config, st watermark.State, statePath string) error {
	if conn == nil || st.Cursor == nil || st.TotalRows == 0 || c.Source.DeletedColumn != "" {
		return nil
	}
	t := c.Sink.Ident
	q := pgutil.Qualified(t.Schema, t.Name)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", q).Scan(&exists); err != nil {
		return fmt.Errorf("look for the copy %s: %w", t, err)
	}
	state := "missing"
	if exists {
		var any bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+q+")").Scan(&any); err != nil {
			return sink.Explain(ctx, conn, c, []string{t.String()}, fmt.Errorf("look into the copy %s: %w", t, err))
		}
		if any {
			return nil
		}
		state = "empty"
	}
	return c.ErrorAt("sink.table", &sourceerr.ResyncNeeded{Source: c.Name, Alt: "(or --from TIME to keep only newer rows)",
		Reason: fmt.Sprintf("the copy %s is %s, but the watermark of source %s in %s is at (%s) after %d rows were applied: the copy was dropped or emptied (or the sink is another database), and resuming would copy only the rows after the watermark; to rebuild it ",
			t, state, c.Name, statePath, strings.Join(st.Cursor, ", "), st.TotalRows)})
}
