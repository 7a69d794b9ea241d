package coupon

import (
	"context"
	"fmt"
	"maps"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/source"
)

// dsnParams are the session parameters a DSN sets (options, search_path,
// any other run-time setting); nil when it does not parse.
func dsnParams(dsn string) map[string]string {
	c, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil
	}
	return c.RuntimeParams
}

// session is what a server reports about one connection: which server and
// database it is, and as whom it reads.
type session struct {
	system, started, addr, port string
	recovery                    bool
	database, currentUser, user string
}

// sessionOf asks the server behind conn who and where the connection is.
// system_identifier is read only where the role may call
// pg_control_system(); the postmaster's start time, address and port still
// tell two servers apart.
func sessionOf(ctx context.Context, conn source.Querier) (session, error) {
	var s session
	err := conn.QueryRow(ctx, `
SELECT CASE WHEN has_function_privilege('pg_control_system()', 'EXECUTE')
            THEN (SELECT system_identifier::text FROM pg_control_system()) ELSE '' END,
       pg_postmaster_start_time()::text, coalesce(host(inet_server_addr()), ''),
       coalesce(inet_server_port()::text, current_setting('port')), pg_is_in_recovery(),
       current_database()::text, current_user::text, session_user::text`).Scan(
		&s.system, &s.started, &s.addr, &s.port, &s.recovery, &s.database, &s.currentUser, &s.user)
	return s, err
}

// sameRights reports whether the sink connection reads exactly what the
// source connection reads: the same server (not a standby of it), the same
// database, the same role, and the same session parameters from the DSNs
// (options such as a role or a setting that a row-level security policy
// reads).
// Only then may the targets be frozen by one INSERT ... SELECT on the sink
// connection; otherwise they are streamed through the source connection,
// whose role decides what the targets are. The DSN text is not compared:
// two spellings of one server are the same, and one spelling (a pooler, a
// different user) may be different rights.
func sameRights(ctx context.Context, src, dst source.Querier, srcDSN, dstDSN string) (bool, error) {
	if !maps.Equal(dsnParams(srcDSN), dsnParams(dstDSN)) {
		return false, nil
	}
	a, err := sessionOf(ctx, src)
	if err != nil {
		return false, fmt.Errorf("source: ask the server who this session is: %w", err)
	}
	b, err := sessionOf(ctx, dst)
	if err != nil {
		return false, fmt.Errorf("ask the sink's server who this session is: %w", err)
	}
	return a == b && !a.recovery, nil
}
