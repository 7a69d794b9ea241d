package coupon

import (
	"context"
	"fmt"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/pgutil"
)

// TestSameRights: the shortcut that freezes targets on the sink connection
// is taken only when the servers report the same server, database and role
// and the DSNs set the same session parameters, whatever the DSN text.
func TestSameRights(t *testing.T) {
	ctx := context.Background()
	db, other := pgtest.NewDB(t), pgtest.NewDB(t)
	role := pgtest.NewRole(t, db, "syncd_rights")
	with := func(f func(u *url.URL)) string {
		u, err := url.Parse(db.URL)
		if err != nil {
			t.Fatal(err)
		}
		f(u)
		return u.String()
	}
	asRole := with(func(u *url.URL) { u.User = url.User(role) })
	withOption := with(func(u *url.URL) {
		if u.RawQuery != "" {
			u.RawQuery += "&"
		}
		u.RawQuery += "options=-c%20app.tenant%3D2"
	})
	pc, err := pgconn.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	keyValue := fmt.Sprintf("host=%s port=%d dbname=%s user=%s sslmode=disable", pc.Host, pc.Port, pc.Database, pc.User)

	for _, c := range []struct {
		name     string
		src, dst string
		want     bool
	}{
		{"one DSN", db.URL, db.URL, true},
		{"two spellings of one DSN", db.URL, keyValue, true},
		{"one role on both sides", asRole, asRole, true},
		{"another role", asRole, db.URL, false},
		{"another database", db.URL, other.URL, false},
		{"other session parameters", withOption, db.URL, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, err := pgutil.Connect(ctx, c.src, "source")
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close(ctx)
			dst, err := pgutil.Connect(ctx, c.dst, "sink")
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close(ctx)
			got, err := sameRights(ctx, src, dst, c.src, c.dst)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("sameRights = %v, want %v", got, c.want)
			}
		})
	}
}
