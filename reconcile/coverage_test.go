package reconcile_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// coverageReport is the part of `reconcile --json` these tests read.
type coverageReport struct {
	Missing, Extra, Changed int64
	Duplicate               int64
	NullKey                 int64 `json:"null_key"`
	Keys                    struct {
		Missing, Extra, Changed, Duplicate []string
		NullKey                            []string `json:"null_key"`
	}
	NotCovered   map[string]int64 `json:"not_covered"`
	NullCursor   int64            `json:"null_cursor_compared"`
	AheadOfClock int64            `json:"ahead_of_clock_compared"`
	RowsCompared int64            `json:"rows_compared"`
	KeyScans     int64            `json:"key_scans"`
	After        *coverageReport  `json:"after_repair"`
}

// reconcileJSON runs `syncd reconcile --json` with extra args and returns
// the report, stderr and the exit code.
func reconcileJSON(t *testing.T, f *fixture, source string, args ...string) (coverageReport, string, int) {
	t.Helper()
	bin := buildBinary(t)
	r := bin.Run(t, nil, append([]string{"reconcile", "--config", f.cfgFile, "--state", f.stateFile, "--source", source, "--json"}, args...)...)
	var rep coverageReport
	if r.Stdout == "" && r.Code == 2 {
		return rep, r.Stderr, r.Code // a config error: nothing compared
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("reconcile --json (exit %d) printed %q: %v; stderr %s", r.Code, r.Stdout, err, r.Stderr)
	}
	return rep, r.Stderr, r.Code
}

const plainTable = `CREATE TABLE t (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, val text);
INSERT INTO t SELECT g, '2026-01-01'::timestamptz + g * interval '1 s', 'v' || g FROM generate_series(1, 300) g`

const plainYAML = `name: t
source:
  dsn: %[1]s
  table: t
  cursor: [updated_at, id]
sink:
  dsn: %[2]s
  table: t
`

// TestPendingRowsAreNotCoveredUntilTheNextRun: rows written after the last
// run cannot be judged; reconcile counts them as pending and exits 1 with
// the command to run, and after that run it proves the copy equal.
func TestPendingRowsAreNotCoveredUntilTheNextRun(t *testing.T) {
	f := newSimple(t, plainTable, plainYAML)
	f.closeStore(t)
	f.src.Exec(t, "INSERT INTO t SELECT g, now(), 'new' FROM generate_series(301, 303) g")
	f.src.Exec(t, "UPDATE t SET val = 'edited', updated_at = now() WHERE id = 10")

	rep, errOut, code := reconcileJSON(t, f, "t")
	if code != 1 {
		t.Fatalf("rows past the watermark: exit %d, want 1; stderr %s", code, errOut)
	}
	if rep.NotCovered["pending"] != 4 || rep.Missing+rep.Extra+rep.Changed != 0 || rep.RowsCompared != 299 {
		t.Fatalf("report %+v; want 4 pending rows, no difference, 299 rows compared", rep)
	}
	want := "source t: 4 rows of t not compared yet (pending: newer than the watermark: 4); run `syncd run --once --source t`, then reconcile again"
	if !strings.Contains(errOut, want) {
		t.Errorf("stderr %q lacks %q", errOut, want)
	}
	r := buildBinary(t).Run(t, nil, "reconcile", "--config", f.cfgFile, "--state", f.stateFile, "--source", "t")
	if !strings.Contains(r.Stdout, "not compared: 4 rows (pending: newer than the watermark)") || strings.Contains(r.Stdout, "equals") {
		t.Errorf("text report:\n%s", r.Stdout)
	}

	if r := buildBinary(t).Run(t, nil, "run", "--once", "--config", f.cfgFile, "--state", f.stateFile); r.Code != 0 {
		t.Fatalf("run --once: exit %d: %s", r.Code, r.Stderr)
	}
	rep, errOut, code = reconcileJSON(t, f, "t")
	if code != 0 || len(rep.NotCovered) != 0 || rep.RowsCompared != 303 {
		t.Fatalf("after the run: exit %d, report %+v; stderr %s", code, rep, errOut)
	}
	assertSameTables(t, f.src, f.dst, "t")

	// A copy row is judged by its source row, whatever its own cursor: one
	// stamped past the watermark (written by something else) whose source
	// row is synced is changed; one the source does not hold is extra.
	f.dst.Exec(t, "UPDATE t SET updated_at = now() + interval '1 hour' WHERE id = 20")
	f.dst.Exec(t, "INSERT INTO t VALUES (999, now() + interval '1 hour', 'stray')")
	rep, _, code = reconcileJSON(t, f, "t")
	if code != 1 || len(rep.NotCovered) != 0 {
		t.Fatalf("copy rows past the watermark: exit %d, report %+v", code, rep)
	}
	assertKeys(t, "changed", rep.Keys.Changed, "20")
	assertKeys(t, "extra", rep.Keys.Extra, "999")
}

const nullableCursorTable = `CREATE TABLE t (id bigint PRIMARY KEY, updated_at timestamptz, val text);
INSERT INTO t SELECT g, '2026-01-01'::timestamptz + g * interval '1 s', 'v' || g FROM generate_series(1, 300) g`

// TestRowsOutsideTheCursorRangeAreCompared: rows with a NULL cursor and rows
// stamped past the source's clock ('infinity', 2099) are compared whatever
// the watermark (a run copies them in its extra pass): missing from the
// copy they are differences, present they are equal.
func TestRowsOutsideTheCursorRangeAreCompared(t *testing.T) {
	f := newSimple(t, nullableCursorTable, plainYAML)
	f.closeStore(t)
	// Written after the run, as a writer would: the run's extra pass copies
	// them; here the copy has not got them yet.
	f.src.Exec(t, `INSERT INTO t VALUES (401, NULL, 'null cursor'), (402, 'infinity', 'infinity'), (403, '2099-01-01', 'typo year')`)

	rep, errOut, code := reconcileJSON(t, f, "t")
	if code != 1 {
		t.Fatalf("rows missing from the copy: exit %d, want 1; stderr %s", code, errOut)
	}
	assertKeys(t, "missing", rep.Keys.Missing, "401", "402", "403")
	if rep.Missing != 3 || rep.NullCursor != 1 || rep.AheadOfClock != 2 || len(rep.NotCovered) != 0 || rep.RowsCompared != 303 {
		t.Fatalf("report %+v; want 3 missing (1 null cursor, 2 ahead of the clock compared), nothing left out", rep)
	}
	if !strings.Contains(errOut, "source t: t and t differ: 3 missing, 0 extra, 0 changed; run `syncd reconcile --source t --repair`") {
		t.Errorf("stderr %q", errOut)
	}

	// The copy holds two of them, as the run's pass writes them: only the
	// third is missing.
	f.dst.Exec(t, `INSERT INTO t VALUES (401, NULL, 'null cursor'), (402, 'infinity', 'infinity')`)
	rep, _, code = reconcileJSON(t, f, "t")
	if code != 1 || rep.Missing != 1 {
		t.Fatalf("one row missing: exit %d, report %+v", code, rep)
	}
	assertKeys(t, "missing", rep.Keys.Missing, "403")
	// A wrong value in a NULL-cursor row is a change like any other.
	f.dst.Exec(t, `UPDATE t SET val = 'wrong' WHERE id = 401`)
	rep, _, code = reconcileJSON(t, f, "t", "--repair")
	if code != 0 || rep.After == nil || rep.After.Missing+rep.After.Changed != 0 {
		t.Fatalf("--repair: exit %d, report %+v", code, rep)
	}
	assertKeys(t, "changed", rep.Keys.Changed, "401")
	assertSameTables(t, f.src, f.dst, "t")
	if _, errOut, code := reconcileJSON(t, f, "t"); code != 0 {
		t.Fatalf("after the repair: exit %d: %s", code, errOut)
	}
}

// TestDuplicateKeysInTheCopy: a copy without a unique constraint holding a
// key twice (once right, once wrong; and an exact double) is not equal;
// --repair leaves one correct row per key, and fixes the other differences
// of that copy too, without the ON CONFLICT a unique index would allow.
func TestDuplicateKeysInTheCopy(t *testing.T) {
	f := newSimple(t, plainTable, plainYAML)
	f.closeStore(t)
	if rep := f.reconcileJSONOK(t); rep.KeyScans != 0 {
		t.Errorf("a copy with a primary key was scanned %d times for duplicate keys; want 0", rep.KeyScans)
	}
	f.dst.Exec(t, `ALTER TABLE t DROP CONSTRAINT t_pkey`)
	f.dst.Exec(t, `INSERT INTO t SELECT id, updated_at, 'wrong' FROM t WHERE id = 5`)
	f.dst.Exec(t, `INSERT INTO t SELECT * FROM t WHERE id = 6`)
	f.dst.Exec(t, `DELETE FROM t WHERE id = 7`)
	f.dst.Exec(t, `UPDATE t SET val = 'changed' WHERE id = 8`)

	rep, errOut, code := reconcileJSON(t, f, "t")
	if code != 1 {
		t.Fatalf("duplicate keys: exit %d, want 1; stderr %s", code, errOut)
	}
	assertKeys(t, "duplicate", rep.Keys.Duplicate, "5", "6")
	assertKeys(t, "missing", rep.Keys.Missing, "7")
	assertKeys(t, "changed", rep.Keys.Changed, "8")
	if rep.Duplicate != 2 || rep.Missing != 1 || rep.Changed != 1 || rep.Extra != 0 || rep.KeyScans == 0 {
		t.Fatalf("report %+v", rep)
	}
	if !strings.Contains(errOut, "1 missing, 0 extra, 1 changed, 2 keys held more than once in the copy") {
		t.Errorf("stderr %q", errOut)
	}

	rep, errOut, code = reconcileJSON(t, f, "t", "--repair")
	if code != 0 || rep.After == nil || rep.After.Duplicate != 0 {
		t.Fatalf("--repair: exit %d, report %+v; stderr %s", code, rep, errOut)
	}
	assertSameTables(t, f.src, f.dst, "t")
	if _, errOut, code := reconcileJSON(t, f, "t"); code != 0 {
		t.Fatalf("after the repair: exit %d: %s", code, errOut)
	}
}

// TestNullKeys: a row whose key is NULL cannot be identified: in the copy
// (a unique index on a nullable key lets any number in) it is a difference
// that --repair deletes; a source whose key column allows NULL is refused.
func TestNullKeys(t *testing.T) {
	t.Run("copy", func(t *testing.T) {
		t.Parallel()
		f := newSimple(t, plainTable, plainYAML)
		f.closeStore(t)
		f.dst.Exec(t, `ALTER TABLE t DROP CONSTRAINT t_pkey`)
		f.dst.Exec(t, `ALTER TABLE t ALTER COLUMN id DROP NOT NULL`)
		f.dst.Exec(t, `CREATE UNIQUE INDEX ON t (id)`)
		f.dst.Exec(t, `INSERT INTO t VALUES (NULL, '2026-01-01', 'a'), (NULL, '2026-01-01', 'a')`)
		rep, errOut, code := reconcileJSON(t, f, "t")
		if code != 1 || rep.NullKey != 2 || rep.Missing+rep.Extra+rep.Changed+rep.Duplicate != 0 {
			t.Fatalf("NULL keys in the copy: exit %d, report %+v; stderr %s", code, rep, errOut)
		}
		assertKeys(t, "null key", rep.Keys.NullKey, "NULL (copy)", "NULL (copy)")
		if !strings.Contains(errOut, "2 rows with a NULL sink.key") {
			t.Errorf("stderr %q", errOut)
		}
		rep, errOut, code = reconcileJSON(t, f, "t", "--repair")
		if code != 0 || rep.After == nil || rep.After.NullKey != 0 {
			t.Fatalf("--repair: exit %d, report %+v; stderr %s", code, rep, errOut)
		}
		assertSameTables(t, f.src, f.dst, "t")
	})
	t.Run("source", func(t *testing.T) {
		t.Parallel()
		f := newSimple(t, `CREATE TABLE t (id bigint NOT NULL, updated_at timestamptz NOT NULL, val text);
CREATE UNIQUE INDEX ON t (id);
INSERT INTO t SELECT g, '2026-01-01'::timestamptz + g * interval '1 s', 'v' || g FROM generate_series(1, 300) g`, plainYAML)
		f.closeStore(t)
		f.src.Exec(t, `ALTER TABLE t ALTER COLUMN id DROP NOT NULL`)
		f.src.Exec(t, `INSERT INTO t VALUES (NULL, '2026-01-01 00:00:00.5', 'no key')`)
		// Describing the source refuses a nullable key column outright (a
		// config error, exit 2), before anything is compared or repaired.
		_, errOut, code := reconcileJSON(t, f, "t", "--repair")
		if code != 2 || !strings.Contains(errOut, "allows NULL") || !strings.Contains(errOut, `ALTER COLUMN "id" SET NOT NULL`) {
			t.Fatalf("a NULL key in the source: exit %d, want 2 naming the fix; stderr %s", code, errOut)
		}
	})
}

// TestSoftDeletesEndToEnd: sync, soft-delete rows in the source, sync,
// reconcile with the real binary: equal (exit 0), with the deleted rows
// gone from the copy, or kept with their flag under keep_deleted.
func TestSoftDeletesEndToEnd(t *testing.T) {
	for _, keep := range []bool{false, true} {
		name := map[bool]string{false: "removed", true: "kept"}[keep]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			yaml := softYAML
			if keep {
				yaml += "  keep_deleted: true\n"
			}
			f := newSimple(t, fmtDDL("timestamptz"), yaml)
			f.closeStore(t)
			bin := buildBinary(t)
			f.src.Exec(t, "UPDATE t SET deleted = now(), updated_at = now() WHERE id IN (3, 77, 150)")
			if r := bin.Run(t, nil, "run", "--once", "--config", f.cfgFile, "--state", f.stateFile); r.Code != 0 {
				t.Fatalf("run --once: exit %d: %s", r.Code, r.Stderr)
			}
			want := "deleted IS NULL"
			if keep {
				want = "true"
			}
			q := "SELECT concat_ws('|', id, updated_at, deleted, val) FROM t WHERE " + want + " ORDER BY id"
			src := queryStrings(t, f.src, q)
			dst := queryStrings(t, f.dst, "SELECT concat_ws('|', id, updated_at, deleted, val) FROM t ORDER BY id")
			if strings.Join(src, "\n") != strings.Join(dst, "\n") || len(dst) != map[bool]int{false: 197, true: 200}[keep] {
				t.Fatalf("copy holds %d rows, want the source's %d (keep_deleted %v)", len(dst), len(src), keep)
			}
			rep, errOut, code := reconcileJSON(t, f, "t")
			if code != 0 || rep.Missing+rep.Extra+rep.Changed != 0 || len(rep.NotCovered) != 0 {
				t.Fatalf("reconcile: exit %d, report %+v; stderr %s", code, rep, errOut)
			}
			// A soft-deleted row back in the copy is extra unless kept.
			if !keep {
				f.dst.Exec(t, "INSERT INTO t VALUES (77, now(), now(), 'v77')")
				rep, _, code = reconcileJSON(t, f, "t")
				if code != 1 {
					t.Fatalf("a deleted row in the copy: exit %d, report %+v", code, rep)
				}
				assertKeys(t, "extra", rep.Keys.Extra, "77")
			}
		})
	}
}

// reconcileJSONOK runs reconcile on f's source "t" and requires exit 0.
func (f *fixture) reconcileJSONOK(t *testing.T) coverageReport {
	t.Helper()
	rep, errOut, code := reconcileJSON(t, f, "t")
	if code != 0 {
		t.Fatalf("reconcile: exit %d, report %+v; stderr %s", code, rep, errOut)
	}
	return rep
}
