package reconcile_test

import (
	"context"
	"testing"

	"github.com/syncd/syncd/reconcile"
)

// TestKeyKinds runs the comparison on keys that are not a single integer
// (text, uuid, composite), which bisect the hash of the key, and on an int
// key with a small leaf size and sparse values, which bisects the key.
func TestKeyKinds(t *testing.T) {
	cases := []struct {
		name, ddl, cursor, key string
		missing, extra, change string // SQL run on the copy / source
		wantMissing, wantExtra string
		wantChanged            string
	}{{
		name: "text",
		ddl: `CREATE TABLE t (code text PRIMARY KEY, updated_at timestamptz NOT NULL, val text);
INSERT INTO t SELECT 'c-' || g, '2026-01-01'::timestamptz + g * interval '1 ms', 'v' || g FROM generate_series(1, 5000) g`,
		cursor: "[updated_at, code]", key: "",
		missing: `DELETE FROM t WHERE code = 'c-17'`, extra: `INSERT INTO t VALUES ('zz, top', now(), 'x')`,
		change:      `UPDATE t SET val = 'changed' WHERE code = 'c-4000'`,
		wantMissing: "c-17", wantExtra: "zz, top", wantChanged: "c-4000",
	}, {
		name: "uuid",
		ddl: `CREATE TABLE t (id uuid PRIMARY KEY, updated_at timestamptz NOT NULL, val int);
INSERT INTO t SELECT md5(g::text)::uuid, '2026-01-01'::timestamptz + g * interval '1 ms', g FROM generate_series(1, 5000) g`,
		cursor: "[updated_at, id]", key: "",
		missing: `DELETE FROM t WHERE id = md5('9')::uuid`, extra: `INSERT INTO t VALUES (md5('x')::uuid, now(), 0)`,
		change:      `UPDATE t SET val = NULL WHERE id = md5('2500')::uuid`,
		wantMissing: "45c48cce-2e2d-7fbd-ea1a-fc51c7c6ad26", wantExtra: "9dd4e461-268c-8034-f5c8-564e155c67a6", wantChanged: "f7696a9b-362a-c5a5-1c3d-c8f098b73923",
	}, {
		name: "composite",
		ddl: `CREATE TABLE t (tenant int, seq int, updated_at timestamptz NOT NULL, val numeric, PRIMARY KEY (tenant, seq));
INSERT INTO t SELECT g % 7, g, '2026-01-01'::timestamptz + g * interval '1 ms', g FROM generate_series(1, 5000) g`,
		cursor: "[updated_at, tenant, seq]", key: "key: [tenant, seq]",
		missing: `DELETE FROM t WHERE seq = 700`, extra: `INSERT INTO t VALUES (9, 1, now(), 1)`,
		change:      `UPDATE t SET val = val + 0.5 WHERE seq = 12`,
		wantMissing: "0,700", wantExtra: "9,1", wantChanged: "5,12",
	}, {
		name: "quoted-identifiers",
		ddl: `CREATE TABLE t ("Code X" text PRIMARY KEY, "Updated At" timestamptz NOT NULL, "v'al" text, "select" int);
INSERT INTO t SELECT 'K' || g, '2026-01-01'::timestamptz + g * interval '1 ms', 'v' || g, g FROM generate_series(1, 2000) g`,
		cursor: `["Updated At", "Code X"]`, key: "",
		missing: `DELETE FROM t WHERE "Code X" = 'K5'`, extra: `INSERT INTO t VALUES ('K''new', now(), 'x', 1)`,
		change:      `UPDATE t SET "select" = -1 WHERE "Code X" = 'K1999'`,
		wantMissing: "K5", wantExtra: "K'new", wantChanged: "K1999",
	}, {
		name: "sparse-int",
		ddl: `CREATE TABLE t (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, val text);
INSERT INTO t SELECT CASE WHEN g % 2 = 0 THEN g ELSE g * 1000000000000 END, '2026-01-01'::timestamptz + g * interval '1 ms', 'v' || g FROM generate_series(1, 5000) g`,
		cursor: "[updated_at, id]", key: "",
		missing: `DELETE FROM t WHERE id = 3000000000000`, extra: `INSERT INTO t VALUES (-5, now(), 'x')`,
		change:      `UPDATE t SET val = 'v' WHERE id = 4998`,
		wantMissing: "3000000000000", wantExtra: "-5", wantChanged: "4998",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newSimple(t, tc.ddl, "name: t\nsource:\n  dsn: %[1]s\n  table: t\n  cursor: "+tc.cursor+"\nsink:\n  dsn: %[2]s\n  table: t\n  "+tc.key+"\n")
			src, dst, cfg, store, ctx := f.src, f.dst, f.cfg, f.store, context.Background()
			dst.Exec(t, tc.missing)
			dst.Exec(t, tc.extra)
			dst.Exec(t, tc.change)
			for _, leaf := range []int{0, 16} {
				rep, err := reconcile.Run(ctx, cfg, store, reconcile.Options{LeafRows: leaf, Logger: quietLogger()})
				if err != nil {
					t.Fatal(err)
				}
				assertKeys(t, "missing", rep.Keys.Missing, tc.wantMissing)
				assertKeys(t, "extra", rep.Keys.Extra, tc.wantExtra)
				assertKeys(t, "changed", rep.Keys.Changed, tc.wantChanged)
				assertCounts(t, rep, 1, 1, 1)
				t.Logf("leaf %d: compared %d, fetched %d, %d checksum queries", leaf, rep.RowsCompared, rep.RowsFetched, rep.ChecksumQueries)
			}
			rep, err := reconcile.Run(ctx, cfg, store, reconcile.Options{Repair: true, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Clean() {
				t.Fatalf("repair left differences: %+v", rep.After)
			}
			assertSameTables(t, src, dst, "t")
		})
	}
}
