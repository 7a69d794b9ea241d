// Package pgutil holds what every PostgreSQL connection of syncd shares:
// session settings that make text values exact and portable (UTC, ISO dates,
// full float precision, hex bytea), identifier quoting, and the COPY text
// encoding of a page.
package pgutil

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/syncd/syncd/config"
)

// AppName is the application_name of every syncd session, for people
// reading pg_stat_activity. The read bound never trusts it: any session can
// set it (own.go identifies syncd's sessions).
const AppName = "syncd"

// settings are the session parameters every syncd connection runs with.
var settings = map[string]string{
	"TimeZone":           "UTC",
	"DateStyle":          "ISO, YMD",
	"IntervalStyle":      "postgres",
	"extra_float_digits": "3",
	"bytea_output":       "hex",
	"application_name":   AppName,
}

// Connect opens one connection for role ("source" or "sink"). A connection
// that cannot be made is a *ConnectError (see Locate); a DSN that does not
// parse is a config.ErrInvalid. Errors never contain the DSN's password.
func Connect(ctx context.Context, dsn, role string) (*pgx.Conn, error) {
	return connect(ctx, dsn, role, nil)
}

// ConnectBulk is Connect for a connection that reads a stream of rows (a
// first load's COPY): the protocol reader takes up to 256 kB per read from
// the socket instead of 8 kB, a fifth of the system calls of a 300 MB copy.
func ConnectBulk(ctx context.Context, dsn, role string) (*pgx.Conn, error) {
	return connect(ctx, dsn, role, func(cfg *pgx.ConnConfig) {
		cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
			return pgproto3.NewFrontend(bufio.NewReaderSize(r, 256<<10), w)
		}
	})
}

// connect is Connect with a hook that adjusts the connection's settings.
func connect(ctx context.Context, dsn, role string, adjust func(*pgx.ConnConfig)) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%s.dsn: %w (%w)", role, dsnError(err, dsn), config.ErrInvalid)
	}
	// Parameter names are case-insensitive to the server: a DSN's
	// "timezone" or "datestyle" (or PGTZ, which pgx passes as "timezone")
	// would travel beside ours, and which one wins is not defined. Ours
	// replace them.
	for k := range cfg.RuntimeParams {
		for name := range settings {
			if k != name && strings.EqualFold(k, name) {
				delete(cfg.RuntimeParams, k)
			}
		}
	}
	for k, v := range settings {
		cfg.RuntimeParams[k] = v
	}
	if adjust != nil {
		adjust(cfg)
	}
	ctr := counting(ctx, cfg)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, classify(err, &cfg.Config, role, dsn)
	}
	if ctr != nil {
		ctr.started(conn)
	}
	registerOwn(ctx, conn)
	return conn, nil
}

// Describe names a DSN's user, host and database without its password.
func Describe(dsn string) string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "(unparsable dsn)"
	}
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

// WithDatabase returns a postgres:// URL with its database replaced by db;
// a DSN that is not a URL comes back unchanged.
func WithDatabase(raw, db string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = "/" + db
	return u.String()
}

// Password returns the password a DSN carries, or "".
func Password(dsn string) string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		if u, uerr := url.Parse(dsn); uerr == nil && u.User != nil {
			p, _ := u.User.Password()
			return p
		}
		return ""
	}
	return cfg.Password
}

// Scrub removes a DSN's password from text.
func Scrub(text, dsn string) string {
	if p := Password(dsn); p != "" {
		text = strings.ReplaceAll(text, p, "xxxxx")
	}
	return text
}

// scrubbed wraps an error whose text must not show the DSN's password.
type scrubbed struct {
	err error
	dsn string
}

func (s scrubbed) Error() string { return Scrub(s.err.Error(), s.dsn) }
func (s scrubbed) Unwrap() error { return s.err }

// Ident quotes one identifier.
func Ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// Qualified quotes schema.name.
func Qualified(schema, name string) string { return pgx.Identifier{schema, name}.Sanitize() }

// IdentList quotes and joins names with ", ", each prefixed by prefix (for
// example "t." or "EXCLUDED.").
func IdentList(prefix string, names []string) string {
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(prefix)
		b.WriteString(Ident(n))
	}
	return b.String()
}
