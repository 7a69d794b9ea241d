package coupon

import (
	"context"
	"fmt"
	"maps"
	"sync"

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
	databaseOID                 uint32
}

// sessionOf asks the server behind conn who and where the connection is,
// in one round trip: the cluster (system_identifier, where the role may
// call pg_control_system(); the postmaster's start time, address and port
// tell two servers apart in any case), the database by name and OID, and
// the roles.
func sessionOf(ctx context.Context, conn source.Querier) (session, error) {
	var s session
	err := conn.QueryRow(ctx, `
SELECT CASE WHEN has_function_privilege('pg_control_system()', 'EXECUTE')
            THEN (SELECT system_identifier::text FROM pg_control_system()) ELSE '' END,
       pg_postmaster_start_time()::text, coalesce(host(inet_server_addr()), ''),
       coalesce(inet_server_port()::text, current_setting('port')), pg_is_in_recovery(),
       current_database()::text, (SELECT oid FROM pg_database WHERE datname = current_database()),
       current_user::text, session_user::text`).Scan(
		&s.system, &s.started, &s.addr, &s.port, &s.recovery, &s.database, &s.databaseOID, &s.currentUser, &s.user)
	return s, err
}

// sameRights reports whether the sink connection reads exactly what the
// source connection reads: the same cluster (its system identifier, and
// the same postmaster: not a standby of it), the same database (by OID),
// the same role, and the same session parameters from the DSNs (options
// such as a role or a setting that a row-level security policy reads).
// Only then is a campaign frozen and granted by the sink's database itself
// (freezeInDB); otherwise the keys are streamed through the source
// connection, whose role decides what the targets are. The DSN text is not compared:
// two spellings of one server are the same, and one spelling (a pooler, a
// different user) may be different rights.
func sameRights(ctx context.Context, src, dst source.Querier, srcDSN, dstDSN string) (bool, error) {
	if !maps.Equal(dsnParams(srcDSN), dsnParams(dstDSN)) {
		return false, nil
	}
	// Both sessions are asked at once: one round trip of the campaign's
	// fixed cost instead of two.
	var (
		a, b session
		aerr error
		wg   sync.WaitGroup
	)
	wg.Go(func() { a, aerr = sessionOf(ctx, src) })
	b, err := sessionOf(ctx, dst)
	wg.Wait()
	if aerr != nil {
		return false, fmt.Errorf("source: ask the server who this session is: %w", aerr)
	}
	if err != nil {
		return false, fmt.Errorf("ask the sink's server who this session is: %w", err)
	}
	return a == b && !a.recovery, nil
}
