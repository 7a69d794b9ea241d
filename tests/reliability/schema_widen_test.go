package reliability

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// A varchar widened in the source is followed by run --once as by the
// daemon: exit 0, the copy's column widened, a long value copied.
func TestRunOnceFollowsWidening(t *testing.T) {
	db := pgtest.NewDB(t)
	cfg, state := identityCopy(t, db, "")
	db.Exec(t, `ALTER TABLE i_src ALTER COLUMN name TYPE varchar(200)`)
	db.Exec(t, fmt.Sprintf(`UPDATE i_src SET name = '%s', updated_at = now() WHERE id %% 100 = 0`, strings.Repeat("w", 150)))
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("run --once after a widening: %s", r)
	}
	if got := copyColumns(t, db.Pool, "i_copy")["name"]; got != "character varying(200)" {
		t.Fatalf("copy column name is %s, want character varying(200)", got)
	}
	sameCopy(t, db, []string{"id", "name"}, 1000)
	var n int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM i_copy WHERE length(name) = 150").Scan(&n); err != nil || n != 10 {
		t.Fatalf("%d long names in the copy, want 10", n)
	}
	if r := bin.Run(t, nil, "validate", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("validate: %s", r)
	}
}
