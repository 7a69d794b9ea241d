package pgutil

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/config"
)

// Kinds of connection failures (ConnectError.Kind).
const (
	ConnRefused     = "refused"        // nothing listens at the host and port
	ConnUnknownHost = "unknown_host"   // the host name does not resolve
	ConnNoDatabase  = "no_database"    // the database does not exist
	ConnAuth        = "authentication" // password, role, or pg_hba.conf
	ConnTLS         = "tls"            // TLS required by one side and refused by the other, or a certificate not trusted
	ConnTimeout     = "timeout"        // no answer in time (connect_timeout)
	ConnUnreachable = "unreachable"    // no route to the host
	ConnTooMany     = "too_many_connections"
	ConnStarting    = "server_not_ready" // starting up, shutting down, in recovery
	ConnParameter   = "parameter"        // the DSN sets a parameter the server does not know
	ConnInterrupted = "interrupted"      // the context ended (syncd is stopping)
	ConnOther       = "other"
)

// ConnectError is a connection that could not be opened, classified: which
// side, where, as whom, why, and what to check. Its text is one line and
// never holds the DSN's password:
//
//	FILE:LINE: sink.dsn: cannot connect to the sink at 127.0.0.1:5433
//	(database warehouse, user syncd_writer): connection refused: is
//	PostgreSQL running on that host and port? check the host and port in sink.dsn
//
// File and Line are set by Locate (the config knows them); without them
// the text starts at the key. It unwraps to the driver's error, so that
// retry.Classify still sees the SQLSTATE or the network error; a DSN
// parameter the server does not know is also a config.ErrInvalid.
type ConnectError struct {
	Side string // "source" or "sink"
	Key  string // the config key of the DSN: source.dsn, sink.dsn_file, ...
	File string
	Line int

	Addr     string // host:port, or the Unix socket's path
	Database string
	User     string

	Kind  string // one of the Conn* kinds
	Cause string // what went wrong, in a few words
	Check string // what to check or do

	Err error
}

func (e *ConnectError) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: %s: ", e.File, e.Line, e.Key)
	case e.File != "":
		fmt.Fprintf(&b, "%s: %s: ", e.File, e.Key)
	default:
		fmt.Fprintf(&b, "%s: ", e.Key)
	}
	fmt.Fprintf(&b, "cannot connect to the %s at %s (database %s, user %s): %s", e.Side, e.Addr, e.Database, e.User, e.Cause)
	if e.Check != "" {
		b.WriteString(": ")
		b.WriteString(e.Check)
	}
	return b.String()
}

// Unwrap returns the driver's error, and config.ErrInvalid for a failure
// that only a change to the DSN fixes (exit 2).
func (e *ConnectError) Unwrap() []error {
	if e.Kind == ConnParameter {
		return []error{e.Err, config.ErrInvalid}
	}
	return []error{e.Err}
}

// Locate returns err with the position of c's DSN key for side ("source"
// or "sink") when err is a connection failure (a *ConnectError in its
// chain): the ConnectError alone, since it says everything the wrapping
// text would. Any other error comes back as it was.
func Locate(c *config.Config, err error) error {
	var ce *ConnectError
	if c == nil || !errors.As(err, &ce) {
		return err
	}
	out := *ce
	out.Key = c.DSNKey(ce.Side)
	out.File, out.Line = c.File, c.Lines[out.Key]
	if out.Key != ce.Key { // the DSN came from SIDE.dsn_file: the advice names it
		out.Cause = strings.ReplaceAll(ce.Cause, ce.Key, out.Key)
		out.Check = strings.ReplaceAll(ce.Check, ce.Key, out.Key)
	}
	return &out
}

// classify turns the driver's error from connecting with cfg into a
// ConnectError for side.
func classify(err error, cfg *pgconn.Config, side, dsn string) *ConnectError {
	e := &ConnectError{Side: side, Key: side + ".dsn", Addr: addr(cfg), Database: cfg.Database, User: cfg.User, Err: err}
	key := e.Key
	if cfg.Database == "" {
		e.Database = cfg.User // the server's default
	}
	attempt := mainAttempt(err)
	var pe *pgconn.PgError
	var dns *net.DNSError
	var cert *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	switch {
	case errors.As(attempt, &pe):
		serverError(e, pe, cfg, key)
	case errors.Is(attempt, context.Canceled):
		e.Kind, e.Cause = ConnInterrupted, "interrupted before the connection was made"
	case errors.As(attempt, &dns):
		e.Kind = ConnUnknownHost
		if dns.IsNotFound {
			e.Cause = fmt.Sprintf("host name %q not found", dns.Name)
		} else {
			e.Cause = fmt.Sprintf("host name %q could not be looked up (%s)", dns.Name, dns.Err)
		}
		e.Check = "check the host in " + key
	case isTimeout(attempt):
		e.Kind = ConnTimeout
		if cfg.ConnectTimeout > 0 {
			e.Cause = fmt.Sprintf("no answer within connect_timeout (%s)", cfg.ConnectTimeout)
		} else {
			e.Cause = "no answer in time"
		}
		e.Check = "is the host reachable, and does a firewall let the connection through to that port? check the host and port in " + key
	case errors.Is(attempt, syscall.ECONNREFUSED):
		e.Kind, e.Cause = ConnRefused, "connection refused"
		e.Check = "is PostgreSQL running on that host and port? check the host and port in " + key
	case errors.Is(attempt, syscall.ENOENT) && strings.HasPrefix(cfg.Host, "/"):
		e.Kind, e.Cause = ConnRefused, "no server socket there"
		e.Check = "is PostgreSQL running, and are the socket folder (host) and port right? check them in " + key
	case errors.Is(attempt, syscall.EHOSTUNREACH), errors.Is(attempt, syscall.ENETUNREACH):
		e.Kind, e.Cause = ConnUnreachable, "no route to the host"
		e.Check = "check the host in " + key + " and the network between syncd and the server"
	case tlsRefused(attempt):
		e.Kind, e.Cause = ConnTLS, "the server does not accept TLS connections, and the sslmode in "+key+" requires TLS"
		e.Check = "enable ssl on the server, or set sslmode=prefer (or disable) in " + key
	case errors.As(attempt, &cert), errors.As(attempt, &unknownCA), errors.As(attempt, &badHost):
		e.Kind, e.Cause = ConnTLS, "the server's TLS certificate was not accepted ("+leafText(attempt)+")"
		e.Check = "check sslrootcert, sslmode and the host name in " + key
	default:
		e.Kind, e.Cause = ConnOther, leafText(attempt)
		e.Check = "check " + key
	}
	e.Cause = Scrub(e.Cause, dsn)
	return e
}

// serverError classifies an error the server answered the startup with.
func serverError(e *ConnectError, pe *pgconn.PgError, cfg *pgconn.Config, key string) {
	switch {
	case pe.Code == "3D000":
		e.Kind, e.Cause = ConnNoDatabase, fmt.Sprintf("database %q does not exist", e.Database)
		e.Check = "check the database name in " + key + " (psql's \\l lists them)"
	case pe.Code == "28P01":
		e.Kind, e.Cause = ConnAuth, fmt.Sprintf("password authentication failed for user %q", cfg.User)
		e.Check = "check the user and password in " + key
		if cfg.Password == "" {
			e.Check = "give the password in " + key + " (or in ~/.pgpass or $PGPASSWORD)"
		}
	case pe.Code == "28000" && strings.Contains(pe.Message, "pg_hba.conf") && strings.Contains(pe.Message, "no encryption"):
		e.Kind, e.Cause = ConnAuth, "the server's pg_hba.conf refuses this connection without TLS ("+pe.Message+")"
		e.Check = "if it accepts it over TLS (a hostssl line), set sslmode=require in " + key + "; otherwise ask for a pg_hba.conf line for this user, database and host"
	case pe.Code == "28000" && strings.Contains(pe.Message, "pg_hba.conf"):
		e.Kind, e.Cause = ConnAuth, "the server's pg_hba.conf refuses this connection ("+pe.Message+")"
		e.Check = "ask for a pg_hba.conf line for this user, database and host, or check the user and database in " + key
	case strings.HasPrefix(pe.Code, "28"):
		e.Kind, e.Cause = ConnAuth, pe.Message
		e.Check = "check the user in " + key
	case pe.Code == "53300" || pe.Code == "53400":
		e.Kind, e.Cause = ConnTooMany, "the server has no connection slot free ("+pe.Message+")"
		e.Check = "wait for other clients to disconnect, or raise max_connections (or the role's CONNECTION LIMIT)"
	case pe.Code == "57P03":
		e.Kind, e.Cause = ConnStarting, "the server does not accept connections now ("+pe.Message+")"
		e.Check = "it is starting up, shutting down or in recovery; syncd tries again"
	case pe.Code == "42704":
		e.Kind, e.Cause = ConnParameter, "the server refused a parameter "+key+" sets ("+pe.Message+")"
		e.Check = "remove it from " + key + " or correct its spelling"
	case pe.Code == "42501":
		e.Kind, e.Cause = ConnAuth, pe.Message
		e.Check = "grant the user CONNECT on the database, or check the user in " + key
	default:
		e.Kind, e.Cause = ConnOther, pe.Message+" (SQLSTATE "+pe.Code+")"
		e.Check = "check " + key
	}
}

// mainAttempt picks, among the attempts the driver made (each address of
// each host, with TLS and, for sslmode=prefer or allow, without), the one
// whose error says most: an answer from the server beats a certificate
// problem, which beats a timeout, which beats a refused connection, which
// beats a failed lookup. "Server refused TLS" from the TLS try of
// sslmode=prefer is only the cause when every attempt failed so.
func mainAttempt(err error) error {
	attempts := leaves(err)
	best, rank := err, -1
	for _, a := range attempts {
		r := attemptRank(a)
		if r >= rank {
			best, rank = a, r
		}
	}
	return best
}

func attemptRank(err error) int {
	var pe *pgconn.PgError
	var dns *net.DNSError
	switch {
	case errors.As(err, &pe):
		return 6
	case tlsRefused(err):
		return 0
	case isTimeout(err):
		return 4
	case errors.Is(err, syscall.ECONNREFUSED):
		return 3
	case errors.As(err, &dns):
		return 2
	}
	return 5 // a certificate error, or anything else the attempt said
}

// leaves splits the driver's error into its attempts: the errors joined
// under its ConnectError (or under its "hostname resolving error").
func leaves(err error) []error {
	var out []error
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		for e := errors.Unwrap(err); e != nil; e = errors.Unwrap(e) {
			if _, ok := e.(interface{ Unwrap() []error }); ok {
				walk(e)
				return
			}
		}
		out = append(out, err)
	}
	walk(err)
	return out
}

func tlsRefused(err error) bool {
	return err != nil && strings.Contains(err.Error(), "server refused TLS connection")
}

func isTimeout(err error) bool {
	var ne net.Error
	return pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// leafText is the innermost message of err: the driver's own, without
// the address and the stages it prefixed.
func leafText(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		if _, ok := next.(*net.OpError); ok {
			return next.Error()
		}
		err = next
	}
}

// addr is where cfg connects: host:port, or the Unix socket's path.
func addr(cfg *pgconn.Config) string {
	if strings.HasPrefix(cfg.Host, "/") {
		return fmt.Sprintf("%s/.s.PGSQL.%d", strings.TrimSuffix(cfg.Host, "/"), cfg.Port)
	}
	return net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
}

// looseSecret finds what looks like a password in a DSN that does not
// parse: a URL's user:PASSWORD@, or password=VALUE.
var looseSecret = regexp.MustCompile(`(?:://[^:/@]*:([^@]*)@)|(?:password\s*=\s*('[^']*'|\S+))`)

// CheckDSN parses dsn as the driver will when connecting. Its error says
// what is wrong without the DSN's text (so without its password).
func CheckDSN(dsn string) error {
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		return dsnError(err, dsn)
	}
	return nil
}

// dsnError describes a DSN the driver could not parse, without its text.
func dsnError(err error, dsn string) error {
	msg := err.Error()
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		// The driver's text starts with the (redacted) DSN; keep what
		// follows it, and of a URL error only its reason.
		prefix := pgconn.NewParseConfigError(pe.ConnString, "", nil).Error()
		msg = strings.TrimPrefix(msg, prefix)
		var ue *url.Error
		if inner := errors.Unwrap(pe); inner != nil && errors.As(inner, &ue) {
			msg = strings.Replace(msg, inner.Error(), ue.Err.Error(), 1)
		}
	}
	msg = Scrub(msg, dsn)
	// The driver redacts what it recognises; a DSN too broken to parse
	// may still hold a password this finds.
	for _, m := range looseSecret.FindAllStringSubmatch(dsn, -1) {
		for _, p := range m[1:] {
			if p = strings.Trim(p, "'"); len(p) >= 3 {
				msg = strings.ReplaceAll(msg, p, "xxxxx")
			}
		}
	}
	return fmt.Errorf("not a valid connection string: %s; write it as a URL, postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=..., or as keyword=value pairs, host=HOST port=PORT dbname=DATABASE user=USER", msg)
}
