package syncer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/syncer"
	"github.com/syncd/syncd/watermark"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// env is a source database, a sink database and a state file.
type env struct {
	src, dst *pgtest.DB
	store    *watermark.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{src: pgtest.NewDB(t), dst: pgtest.NewDB(t)}
	st, err := watermark.Open(filepath.Join(t.TempDir(), "state.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e.store = st
	return e
}

// config builds a source config; extra is appended under source: (indented).
func (e *env) config(t *testing.T, table string, pageSize int, extra string) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`name: test
source:
  dsn: %s
  table: %s
  cursor: [updated_at, id]
  lookback: 0s
  page_size: %d
%s
sink:
  dsn: %s
  table: public.copy
  key: [id]
`, e.src.URL, table, pageSize, extra, e.dst.URL)
	c, err := config.Parse("test.yaml", []byte(y))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return c
}

func (e *env) run(t *testing.T, c *config.Config, o syncer.Options) syncer.Result {
	t.Helper()
	o.Config, o.Store = c, e.store
	res, err := syncer.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return res
}

// tableText returns each row of table as its text form, ordered by id.
func tableText(t *testing.T, db *pgtest.DB, table, cols string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET TimeZone = 'UTC'"); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT id::text, (%s)::text FROM %s t ORDER BY id", cols, table))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var id, row string
	if _, err := pgx.ForEachRow(rows, []any{&id, &row}, func() error {
		out = append(out, id+" "+row)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// assertSame compares the copy with the source row by row and reports the
// keys that are missing, extra or different.
func (e *env) assertSame(t *testing.T, srcTable, cols string) {
	t.Helper()
	src := tableText(t, e.src, srcTable, cols)
	dst := tableText(t, e.dst, "public.copy", cols)
	s := map[string]string{}
	for _, r := range src {
		id, _, _ := strings.Cut(r, " ")
		s[id] = r
	}
	d := map[string]string{}
	var dup []string
	for _, r := range dst {
		id, _, _ := strings.Cut(r, " ")
		if _, ok := d[id]; ok {
			dup = append(dup, id)
		}
		d[id] = r
	}
	var missing, extra, changed []string
	for id, r := range s {
		switch dr, ok := d[id]; {
		case !ok:
			missing = append(missing, id)
		case dr != r:
			changed = append(changed, fmt.Sprintf("%s: source %q copy %q", id, r, dr))
		}
	}
	for id := range d {
		if _, ok := s[id]; !ok {
			extra = append(extra, id)
		}
	}
	if len(missing)+len(extra)+len(changed)+len(dup) > 0 {
		t.Fatalf("copy differs from source (%d source rows, %d copy rows): %d missing %v, %d extra %v, %d changed %v, %d duplicated %v",
			len(src), len(dst), len(missing), first(missing), len(extra), first(extra), len(changed), first(changed), len(dup), first(dup))
	}
}

func first(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}

// jsonLog is a JSON log written by a run: Lines splits it, and each line
// must be one JSON object with no key given twice (slog writes a key as
// often as it is added, and a reader keeps only one of them).
type jsonLog struct{ buf bytes.Buffer }

func (l *jsonLog) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(&l.buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// messages returns each line's msg, failing t on a line that is not one
// JSON object or that names a key twice.
func (l *jsonLog) messages(t *testing.T) []string {
	t.Helper()
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		dec := json.NewDecoder(strings.NewReader(line))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Fatalf("log line is not a JSON object: %s", line)
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				t.Fatalf("log line %s: %v", line, err)
			}
			key := tok.(string)
			if seen[key] {
				t.Errorf("log line names %q twice: %s", key, line)
			}
			seen[key] = true
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("log line %s: %v", line, err)
			}
			if key == "msg" {
				var m string
				_ = json.Unmarshal(v, &m)
				msgs = append(msgs, m)
			}
		}
	}
	return msgs
}
