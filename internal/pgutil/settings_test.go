package pgutil_test

import (
	"context"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/pgutil"
)

// A DSN that spells a session setting in another case (timezone=,
// datestyle=; PGTZ reaches pgx as "timezone") does not race syncd's own:
// every connection runs with TimeZone UTC and DateStyle ISO, YMD.
func TestSessionSettingsWinOverADSNSpelledOtherwise(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	dsn := db.URL + "&timezone=Asia/Tokyo&datestyle=SQL,DMY&INTERVALSTYLE=sql_standard"
	for i := range 20 {
		conn, err := pgutil.Connect(ctx, dsn, "source")
		if err != nil {
			t.Fatal(err)
		}
		var tz, ds, is string
		err = conn.QueryRow(ctx, "SELECT current_setting('TimeZone'), current_setting('DateStyle'), current_setting('IntervalStyle')").Scan(&tz, &ds, &is)
		conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tz != "UTC" || ds != "ISO, YMD" || is != "postgres" {
			t.Fatalf("connection %d runs with TimeZone %q, DateStyle %q, IntervalStyle %q; want UTC, ISO, YMD, postgres", i+1, tz, ds, is)
		}
	}
}

// A sink session gets the server's TCP keepalives (about a minute to
// notice a vanished host and release its run lock), unless they were
// configured: the DSN's (or the server's) are kept.
func TestSinkSessionKeepalives(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	for dsn, want := range map[string][3]string{
		db.URL: {"30", "10", "3"},
		db.URL + "&options=" + "-c%20tcp_keepalives_idle%3D600": {"600", "10", "3"},
	} {
		conn, err := pgutil.ConnectSink(ctx, dsn, pgutil.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		var got [3]string
		err = conn.QueryRow(ctx, "SELECT current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_interval'), current_setting('tcp_keepalives_count')").Scan(&got[0], &got[1], &got[2])
		conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: keepalives idle, interval, count = %v, want %v", dsn, got, want)
		}
	}
}

// A sink session runs without idle_session_timeout, whatever the DSN (or
// the role or database) sets: the session holding a run lock idles while
// a first load's chunks commit on other sessions.
func TestSinkSessionNoIdleTimeout(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	conn, err := pgutil.ConnectSink(ctx, db.URL+"&options=-c%20idle_session_timeout%3D100ms", pgutil.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var got string
	if err := conn.QueryRow(ctx, "SELECT current_setting('idle_session_timeout')").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "0" {
		t.Fatalf("idle_session_timeout of a sink session is %q, want 0", got)
	}
}
