package coupon

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/page"
)

// TestFreezeArraysAsWindow: the two statements that freeze a campaign in
// its database, the arrays of a small table (freezeArraysSQL) and the
// numbered rows of a large one (freezeInDBSQL), write the same chunks and
// grant the same first page, for a key of one column and of two, unique in
// the source or not (GROUP BY), with a where clause bound to as_of; and a
// NULL key fails both the same way, leaving nothing behind.
func TestFreezeArraysAsWindow(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE SCHEMA s_one; CREATE SCHEMA s_dup; CREATE SCHEMA s_two; CREATE SCHEMA s_nul`)
	db.Exec(t, `CREATE TABLE one (id bigint PRIMARY KEY, seen timestamptz NOT NULL)`)
	db.Exec(t, `INSERT INTO one SELECT i, now() - i * interval '1 hour' FROM generate_series(1, 1000) i`)
	db.Exec(t, `CREATE TABLE dup (code text, n int)`) // no unique index: GROUP BY
	db.Exec(t, `INSERT INTO dup SELECT 'c' || (i % 257), i FROM generate_series(1, 2000) i`)
	db.Exec(t, `CREATE TABLE two (region text COLLATE "C", id int, PRIMARY KEY (region, id))`)
	db.Exec(t, `INSERT INTO two SELECT r, i FROM unnest('{north,South,east,west}'::text[]) r, generate_series(1, 90) i`)
	db.Exec(t, `CREATE TABLE nul (id bigint)`)
	db.Exec(t, `INSERT INTO nul SELECT i FROM generate_series(1, 500) i UNION ALL SELECT NULL`)

	cases := []struct {
		table, where string
		keys         []page.Column
		targets      int64
	}{
		{"one", "seen < :as_of - interval '200 hours'", []page.Column{{Name: "id", Type: "bigint"}}, 801},
		{"dup", "n > 10", []page.Column{{Name: "code", Type: "text"}}, 257},
		{"two", "", []page.Column{{Name: "region", Type: "text"}, {Name: "id", Type: "integer"}}, 360},
	}
	scan := func(t *testing.T, q string, dst ...any) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, q).Scan(dst...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	old := countArraysMax
	t.Cleanup(func() { countArraysMax = old })
	freeze := func(t *testing.T, table, where string, keys []page.Column, campaign string, arrays bool) error {
		t.Helper()
		keyNames := make([]string, len(keys))
		for i, k := range keys {
			keyNames[i] = k.Name
		}
		cfg, err := config.Parse("camp.yaml", []byte(fmt.Sprintf(`name: camp
source:
  dsn: %s
  table: public.%s
  cursor: [%s]
  where: "%s"
sink:
  type: coupon_grants
  dsn: %s
  table: s_%s.grants
  campaign: %s
  grant_page_size: 100
`, db.URL, table, strings.Join(keyNames, ", "), where, db.URL, table, campaign)))
		if err != nil {
			t.Fatal(err)
		}
		g, err := Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close(ctx)
		if err := g.Prepare(ctx, keys); err != nil {
			t.Fatal(err)
		}
		countArraysMax = 0 // no table has so few rows: numbered rows
		if arrays {
			countArraysMax = old
		}
		defer func() { countArraysMax = old }()
		froze, err := g.freezeInDB(ctx, config.Table{Schema: "public", Name: table}, 150)
		if err == nil && !froze {
			t.Fatalf("campaign %s of %s: not frozen", campaign, table)
		}
		return err
	}
	for _, c := range cases {
		t.Run(c.table, func(t *testing.T) {
			for _, camp := range []string{"arrays", "window"} {
				if err := freeze(t, c.table, c.where, c.keys, camp, camp == "arrays"); err != nil {
					t.Fatalf("freeze %s of %s: %v", camp, c.table, err)
				}
			}
			names, arrs, typed := make([]string, len(c.keys)), make([]string, len(c.keys)), make([]string, len(c.keys))
			for i, k := range c.keys {
				names[i] = k.Name
				arrs[i] = fmt.Sprintf("key_%d", i+1)
				typed[i] = fmt.Sprintf("u.key_%d::%s", i+1, k.Type)
			}
			list, arrList := strings.Join(names, ", "), strings.Join(arrs, ", ")
			var chunks, targets, firstPage int64
			var sameChunks, sameGrants bool
			scan(t, fmt.Sprintf(`SELECT count(*) FILTER (WHERE campaign_id = 'arrays'), coalesce(sum(n) FILTER (WHERE campaign_id = 'arrays'), 0),
  NOT EXISTS ((SELECT first_pos, n, %[2]s FROM s_%[1]s.grants_target_chunks WHERE campaign_id = 'arrays'
    EXCEPT ALL SELECT first_pos, n, %[2]s FROM s_%[1]s.grants_target_chunks WHERE campaign_id = 'window')
   UNION ALL (SELECT first_pos, n, %[2]s FROM s_%[1]s.grants_target_chunks WHERE campaign_id = 'window'
    EXCEPT ALL SELECT first_pos, n, %[2]s FROM s_%[1]s.grants_target_chunks WHERE campaign_id = 'arrays'))
FROM s_%[1]s.grants_target_chunks`, c.table, arrList), &chunks, &targets, &sameChunks)
			scan(t, fmt.Sprintf(`SELECT count(*) FILTER (WHERE campaign_id = 'arrays'),
  NOT EXISTS ((SELECT %[2]s FROM s_%[1]s.grants WHERE campaign_id = 'arrays' EXCEPT ALL SELECT %[2]s FROM s_%[1]s.grants WHERE campaign_id = 'window')
   UNION ALL (SELECT %[2]s FROM s_%[1]s.grants WHERE campaign_id = 'window' EXCEPT ALL SELECT %[2]s FROM s_%[1]s.grants WHERE campaign_id = 'arrays'))
FROM s_%[1]s.grants`, c.table, list), &firstPage, &sameGrants)
			if targets != c.targets || chunks != (c.targets+99)/100 || !sameChunks {
				t.Fatalf("%s: the arrays froze %d targets in %d chunks, the same as the window: %v; want %d in %d, the same", c.table, targets, chunks, sameChunks, c.targets, (c.targets+99)/100)
			}
			if firstPage != 150 || !sameGrants {
				t.Fatalf("%s: the arrays granted %d targets, the same as the window: %v; want 150, the same", c.table, firstPage, sameGrants)
			}
			// The first page is the first 150 targets in key order.
			var inOrder bool
			scan(t, fmt.Sprintf(`SELECT (SELECT array_agg(k ORDER BY k) FROM (SELECT row(%[2]s) AS k FROM s_%[1]s.grants WHERE campaign_id = 'arrays') s)
  = (SELECT (array_agg(k ORDER BY k))[1:150] FROM (SELECT row(%[3]s) AS k FROM s_%[1]s.grants_target_chunks c, unnest(%[4]s) AS u(%[4]s) WHERE campaign_id = 'arrays') s)`,
				c.table, list, strings.Join(typed, ", "), arrList), &inOrder)
			if !inOrder {
				t.Fatalf("%s: the first page is not the first 150 targets in key order", c.table)
			}
		})
	}
	t.Run("NULL key", func(t *testing.T) {
		keys := []page.Column{{Name: "id", Type: "bigint"}}
		for _, camp := range []string{"arrays", "window"} {
			err := freeze(t, "nul", "", keys, camp, camp == "arrays")
			if err == nil || !strings.Contains(err.Error(), "a key column (id) of a target is NULL") {
				t.Fatalf("freeze %s over a NULL key: %v; want the NULL key error", camp, err)
			}
		}
		var left int64
		scan(t, `SELECT (SELECT count(*) FROM s_nul.grants) + (SELECT count(*) FROM s_nul.grants_target_chunks) + (SELECT count(*) FROM s_nul.syncd_campaigns)`, &left)
		if left != 0 {
			t.Fatalf("a failed freeze left %d rows (grants, chunks, campaign)", left)
		}
	})
}
