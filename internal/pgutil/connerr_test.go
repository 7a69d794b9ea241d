package pgutil_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
)

// A DSN that does not parse is described without its text: whatever is
// wrong with it, its password never shows in the error.
func TestCheckDSNNeverShowsThePassword(t *testing.T) {
	const pw = "Sekr1tPw"
	for _, dsn := range []string{
		"postgres://u:" + pw + "@h:x/db",
		"postgres://u:" + pw + "@h:99999/db",
		"postgres://u:" + pw + "%zz@h/db",
		"postgres://u:" + pw + " x@h/db",
		"postgres://u:" + pw + "@[::1/db",
		"postgres://u:" + pw + "@h/d%zz",
		"host=h password=" + pw + " port=x",
		"host=h password='" + pw + " dbname=x",
		"host=h password " + pw,
		"password=" + pw + " host",
		"postgres://u:" + pw + "@h/db?sslmode=bogus",
		"postgres://u@h/db?password=" + pw + "&connect_timeout=abc",
	} {
		err := pgutil.CheckDSN(dsn)
		if err == nil {
			t.Errorf("%q: no error", dsn)
			continue
		}
		if strings.Contains(err.Error(), pw) || !strings.HasPrefix(err.Error(), "not a valid connection string: ") {
			t.Errorf("%q: %v", dsn, err)
		}
	}
	if err := pgutil.CheckDSN("postgres://u:" + pw + "@h:5432/db?sslmode=disable"); err != nil {
		t.Errorf("a valid DSN: %v", err)
	}
}

// A ConnectError's text, before and after Locate puts it at the DSN key
// of the config (dsn_file when the DSN came from a file); it unwraps to
// the driver's error.
func TestConnectErrorText(t *testing.T) {
	cause := errors.New("driver")
	e := &pgutil.ConnectError{Side: "sink", Key: "sink.dsn", Addr: "127.0.0.1:5433", Database: "warehouse", User: "syncd_writer",
		Kind: pgutil.ConnRefused, Cause: "connection refused", Check: "is PostgreSQL running on that host and port? check the host and port in sink.dsn", Err: cause}
	want := "sink.dsn: cannot connect to the sink at 127.0.0.1:5433 (database warehouse, user syncd_writer): connection refused: is PostgreSQL running on that host and port? check the host and port in sink.dsn"
	if e.Error() != want || !errors.Is(e, cause) {
		t.Fatalf("%q", e.Error())
	}
	e.File, e.Line = "/etc/syncd/orders.yaml", 5
	if got := e.Error(); got != "/etc/syncd/orders.yaml:5: "+want {
		t.Fatalf("%q", got)
	}
	// Given with sink.dsn_file, the error is at that key and names it.
	c := &config.Config{File: "/etc/syncd/orders.yaml", Lines: map[string]int{"sink.dsn_file": 9}, Sink: config.Sink{DSNFile: "/run/secrets/sink"}}
	e.File, e.Line = "", 0
	located := pgutil.Locate(c, fmt.Errorf("open the sink: %w", e))
	if got := located.Error(); got != "/etc/syncd/orders.yaml:9: "+strings.ReplaceAll(want, "sink.dsn", "sink.dsn_file") || !errors.Is(located, cause) {
		t.Fatalf("located: %q", got)
	}
}
