package main_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// source.page_bytes ends a page at the row that would take it past that
// many bytes, whatever source.page_size says, and a page cut short by its
// bytes does not end the run. 25 small rows, then 20 rows of 2 MB and one
// of 6 MB, with page_bytes 5MB: every page the run applies (from its debug
// log) holds at most 5 MB of values or a single row, the run applies all
// 46 rows in at least 11 pages, and the copy equals the source row by row
// (md5 of each value). Pages are read in binary, in text (soft deletes),
// and with page_size 10, so that small rows make the reader leave out the
// server's byte count and the wide rows must be cut by the reader itself.
// (Before: one page of 46 rows, 46 MB, held several times in memory.)
func TestPagesEndAtPageBytes(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		pageSize    int
	}{
		{"binary", "", 1000},
		{"text", "  deleted_column: deleted\n", 1000},
		{"narrow then wide", "", 10},
	} {
		t.Run(tc.name, func(t *testing.T) { testPagesEndAtPageBytes(t, tc.extra, tc.pageSize) })
	}
}

func testPagesEndAtPageBytes(t *testing.T, extra string, pageSize int) {
	const limit = 5 << 20
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE docs (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, body text, blob bytea, meta jsonb, deleted boolean NOT NULL DEFAULT false)`)
	src.Exec(t, `CREATE INDEX ON docs (updated_at, id)`)
	// body: a few bytes up to row 25, then 2 MB of text (6 MB for row 46).
	src.Exec(t, `INSERT INTO docs SELECT g, '2026-10-01 09:00:00+00'::timestamptz + g * interval '1 second',
		CASE WHEN g <= 25 THEN 'n' || g ELSE repeat(md5(g::text), CASE WHEN g = 46 THEN 3 ELSE 1 END * 65536) END,
		decode(md5(g::text), 'hex'), jsonb_build_object('n', g)
		FROM generate_series(1, 46) g`)
	dir := t.TempDir()
	state := filepath.Join(dir, "state.db")
	cfg := writeConfig(t, dir, "docs.yaml", fmt.Sprintf(`name: docs
source:
  dsn: %s
  table: public.docs
  cursor: [updated_at, id]
  page_size: %d
  page_bytes: 5MB
  first_load: {workers: 0}
%ssink:
  dsn: %s
  table: public.docs_copy
  key: [id]
`, src.URL, pageSize, extra, dst.URL))
	env := []string{"SYNCD_STATE=" + state}
	r := bin.Run(t, env, "run", "--config", cfg, "--once", "--log-level", "debug", "--log-format", "json")
	if r.Code != 0 {
		t.Fatalf("run: exit %d: %s", r.Code, r.Stderr)
	}
	// Each page's rows and last id, from its "page applied" record.
	type applied struct {
		Rows   int      `json:"rows"`
		Cursor []string `json:"cursor"`
	}
	var pages []applied
	for _, l := range strings.Split(r.Stderr, "\n") {
		if !strings.Contains(l, `"msg":"page applied"`) {
			continue
		}
		var p applied
		if err := json.Unmarshal([]byte(l), &p); err != nil || len(p.Cursor) != 2 {
			t.Fatalf("page applied record %q: %v", l, err)
		}
		pages = append(pages, p)
	}
	sizes := map[int]int64{}
	rows, err := src.Pool.Query(t.Context(), `SELECT id, octet_length(body) + octet_length(blob) + octet_length(meta::text) FROM docs`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		sizes[id] = n
	}
	rows.Close()
	total, first := 0, 1
	for i, p := range pages {
		last, err := strconv.Atoi(p.Cursor[1])
		if err != nil || last-first+1 != p.Rows {
			t.Fatalf("page %d: %d rows ending at id %s, after id %d", i+1, p.Rows, p.Cursor[1], first-1)
		}
		var bytes int64
		for id := first; id <= last; id++ {
			bytes += sizes[id]
		}
		if bytes > limit && p.Rows > 1 {
			t.Errorf("page %d holds ids %d to %d, %d bytes of values: more than page_bytes (5MB) in more than one row", i+1, first, last, bytes)
		}
		total, first = total+p.Rows, last+1
	}
	if total != 46 || len(pages) < 11 {
		t.Fatalf("the run applied %d rows in %d pages; want all 46 in at least 11 pages of at most 5 MB", total, len(pages))
	}
	sums := `SELECT string_agg(id || ' ' || updated_at || ' ' || md5(body) || ' ' || md5(blob) || ' ' || meta::text || ' ' || deleted, E'\n' ORDER BY id) FROM `
	var want, got string
	if err := src.Pool.QueryRow(t.Context(), sums+"docs").Scan(&want); err != nil {
		t.Fatal(err)
	}
	if err := dst.Pool.QueryRow(t.Context(), sums+"docs_copy").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("the copy differs from the source:\n%s\nwant\n%s", got, want)
	}
}
