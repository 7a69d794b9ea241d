package sink

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgutil"
)

// fsyncWarned remembers the sink databases whose fsync = off was already
// logged: that warning is said once per process, not at every run.
var fsyncWarned sync.Map

// FsyncWarning says why commits to the sink database behind conn cannot be
// durable when its server runs with fsync = off, or "" when it does not.
// syncd makes every commit it relies on wait for the WAL flush, but with
// fsync off that flush never reaches the disk: a crash of the sink's
// machine can lose pages the watermark has already passed. syncd cannot
// change that, so it warns and carries on.
func FsyncWarning(ctx context.Context, conn *pgx.Conn, dsn string) (string, error) {
	var fsync string
	if err := conn.QueryRow(ctx, "SELECT current_setting('fsync')").Scan(&fsync); err != nil {
		return "", fmt.Errorf("read fsync of sink database %s: %w", pgutil.Describe(dsn), err)
	}
	if fsync != "off" {
		return "", nil
	}
	return fmt.Sprintf("sink database %s runs with fsync = off, so its commits are not durable: a crash of its machine can lose rows the watermark has already passed; set fsync = on in that server's postgresql.conf and reload it, or run syncd reconcile --repair after every crash of that machine", pgutil.Describe(dsn)), nil
}

// WarnFsync logs FsyncWarning once per process for each sink database. A
// failure to read the setting is logged at debug level only: the run's own
// statements report a broken connection.
func WarnFsync(ctx context.Context, conn *pgx.Conn, dsn string, log *slog.Logger) {
	w, err := FsyncWarning(ctx, conn, dsn)
	if err != nil {
		log.Debug("fsync of the sink unknown", "err", err)
		return
	}
	if w == "" {
		return
	}
	if _, seen := fsyncWarned.LoadOrStore(pgutil.Describe(dsn), true); !seen {
		log.Warn(w)
	}
}
