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
