package filesink_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/cli"
	"github.com/syncd/syncd/internal/filesink"
	"github.com/syncd/syncd/internal/pgtest"
)

// syncd runs one command line in process, with the files kind registered
// beside the default ones: the registration line a real kind would add to
// cli.DefaultKinds.
func syncd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := &cli.Env{Stdout: &out, Stderr: &errOut, Kinds: cli.DefaultKinds().With(filesink.Kind())}
	err := cli.Run(context.Background(), env, args)
	return out.String(), errOut.String(), cli.ExitCode(err)
}

// requireCopy compares the copy, as a reader of the file makes it (the
// newest line of each key), with the source table row by row.
func requireCopy(t *testing.T, db *pgtest.DB, path string) int {
	t.Helper()
	got, _ := readCopy(t, path)
	rows, err := db.Pool.Query(context.Background(), "SELECT id::text, updated_at, val FROM public.orders ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id string
		var at time.Time
		var val *string
		if err := rows.Scan(&id, &at, &val); err != nil {
			t.Fatal(err)
		}
		n++
		c, ok := got[id]
		if !ok {
			t.Fatalf("row id %s of the source is missing from the copy %s", id, path)
		}
		cat, err := time.Parse("2006-01-02 15:04:05.999999-07", *c["updated_at"])
		if err != nil || !cat.Equal(at) {
			t.Fatalf("row id %s: updated_at %s in the copy, %s in the source (%v)", id, *c["updated_at"], at, err)
		}
		if (val == nil) != (c["val"] == nil) || val != nil && *val != *c["val"] {
			t.Fatalf("row id %s: val %v in the copy, %v in the source", id, c["val"], val)
		}
		delete(got, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) > 0 {
		t.Fatalf("the copy holds %d keys the source does not have", len(got))
	}
	return n
}

// TestCommands drives a files sink through validate, run --once, status,
// resync and reconcile as syncd's command line does, with nothing of the
// kind outside this package but its registration.
func TestCommands(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE public.orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, val text)`)
	db.Exec(t, `INSERT INTO public.orders SELECT g, '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second', CASE WHEN g % 7 = 0 THEN NULL ELSE 'v' || g END FROM generate_series(1, 2500) g`)
	dir, work := t.TempDir(), t.TempDir()
	state := filepath.Join(work, "syncd.db")
	cfgFile := filepath.Join(work, "orders.yaml")
	write := func(directory, extra string) {
		yaml := fmt.Sprintf("name: orders\nsource:\n  dsn: %s\n  table: public.orders\n  cursor: [updated_at, id]\n  page_size: 500\n  lookback: 0s\n  first_load:\n    workers: 0\nsink:\n  type: files\n  directory: %s\n  table: public.orders_copy\n%s", db.URL, directory, extra)
		if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(dir, "")
	copyPath := filepath.Join(dir, "public.orders_copy.jsonl")
	flags := []string{"--config", cfgFile, "--state", state, "--log-level", "warn"}
	cmd := func(name string, more ...string) []string { return append(append([]string{name}, flags...), more...) }

	if out, errOut, code := syncd(t, cmd("validate")...); code != cli.ExitOK {
		t.Fatalf("validate: exit %d\n%s%s", code, out, errOut)
	}

	if _, errOut, code := syncd(t, cmd("run", "--once")...); code != cli.ExitOK {
		t.Fatalf("run --once: exit %d\n%s", code, errOut)
	}
	if n := requireCopy(t, db, copyPath); n != 2500 {
		t.Fatalf("the copy holds %d rows; want 2500", n)
	}

	// Changes and new rows are appended; the newest line of a key is the
	// source's row.
	db.Exec(t, `UPDATE public.orders SET val = 'changed', updated_at = '2026-02-01 00:00:00+00'::timestamptz + id * interval '1 ms' WHERE id % 10 = 0`)
	db.Exec(t, `INSERT INTO public.orders SELECT g, '2026-03-01 00:00:00+00', 'new' FROM generate_series(2501, 2600) g`)
	if _, errOut, code := syncd(t, cmd("run", "--once")...); code != cli.ExitOK {
		t.Fatalf("second run --once: exit %d\n%s", code, errOut)
	}
	requireCopy(t, db, copyPath)
	if _, lines := readCopy(t, copyPath); lines != 2500+250+100 {
		t.Fatalf("after the second run the file holds %d lines; want 2500 + 250 changed + 100 new", lines)
	}

	out, errOut, code := syncd(t, cmd("status", "--json")...)
	if code != cli.ExitOK || !strings.Contains(out, `"name": "orders"`) || !strings.Contains(out, `"rows_written_total": 2850`) {
		t.Fatalf("status: exit %d; want the source with 2850 rows written\n%s%s", code, out, errOut)
	}

	// Reconcile does not apply to this kind: a clear refusal, exit 2.
	out, errOut, code = syncd(t, cmd("reconcile", "--source", "orders")...)
	if code != cli.ExitUsage || !strings.Contains(errOut, "reconcile does not apply") || !strings.Contains(errOut, "files sink") {
		t.Fatalf("reconcile: exit %d; want 2 and the refusal\n%s%s", code, out, errOut)
	}

	// A resync re-reads the whole source: every row is appended again.
	if out, errOut, code := syncd(t, cmd("resync", "--source", "orders", "--from-start")...); code != cli.ExitOK {
		t.Fatalf("resync: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := syncd(t, cmd("run", "--once")...); code != cli.ExitOK {
		t.Fatalf("run --once after resync: exit %d\n%s", code, errOut)
	}
	requireCopy(t, db, copyPath)
	if _, lines := readCopy(t, copyPath); lines != 2850+2600 {
		t.Fatalf("after the resync the file holds %d lines; want 2850 + the 2600 rows again", lines)
	}

	// The copy moved to another directory is another place: its identity
	// differs, so the run refuses the old watermark instead of resuming.
	write(t.TempDir(), "")
	_, errOut, code = syncd(t, cmd("run", "--once")...)
	if code != cli.ExitUsage || !strings.Contains(errOut, "sink.directory") {
		t.Fatalf("run --once into a moved directory: exit %d; want 2 naming sink.directory\n%s", code, errOut)
	}

	// Config errors name the file, the line and the key of the kind.
	write(dir, "  dsn: postgres://localhost/x\n")
	_, errOut, code = syncd(t, cmd("validate")...)
	if code != cli.ExitUsage || !strings.Contains(errOut, cfgFile+":14: sink.dsn: a files sink connects to no database") {
		t.Fatalf("validate with sink.dsn: exit %d\n%s", code, errOut)
	}
	write(dir, "  colour: red\n")
	_, errOut, code = syncd(t, cmd("validate")...)
	if code != cli.ExitUsage || !strings.Contains(errOut, cfgFile+":14: sink.colour: unknown key; the keys here are: ") || !strings.Contains(errOut, "directory") {
		t.Fatalf("validate with an unknown sink key: exit %d\n%s", code, errOut)
	}
	write(filepath.Join(dir, "missing"), "")
	_, errOut, code = syncd(t, cmd("validate")...)
	if code != cli.ExitUsage || !strings.Contains(errOut, cfgFile+":12: sink.directory: ") || !strings.Contains(errOut, "does not exist") {
		t.Fatalf("validate with a missing directory: exit %d\n%s", code, errOut)
	}
	write(dir, "reconcile:\n  schedule: \"0 3 * * *\"\n")
	_, errOut, code = syncd(t, cmd("validate")...)
	if code != cli.ExitUsage || !strings.Contains(errOut, "reconcile: a files sink has no reconcile") {
		t.Fatalf("validate with a reconcile schedule: exit %d\n%s", code, errOut)
	}
	write(dir, "schema_changes: fail\n")
	_, errOut, code = syncd(t, cmd("validate")...)
	if code != cli.ExitUsage || !strings.Contains(errOut, "schema_changes: a files sink does not follow the source's schema") {
		t.Fatalf("validate with schema_changes: fail: exit %d\n%s", code, errOut)
	}
}
