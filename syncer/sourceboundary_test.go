package syncer_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/syncer"
)

// errInjected is the read failure failingSource injects.
var errInjected = errors.New("injected read failure")

// failingSource is the PostgreSQL source behind the run's interface: it
// counts the pages the run reads and fails the read numbered failAt.
type failingSource struct {
	*source.Reader
	failAt int
	reads  int // ReadPage is never called twice at once (one page ahead)
}

func (s *failingSource) ReadPage(ctx context.Context, pos source.Position, limit int) (page.Page, error) {
	s.reads++
	if s.reads == s.failAt {
		return page.Page{}, errInjected
	}
	return s.Reader.ReadPage(ctx, pos, limit)
}

// coreSource hides every capability of the source it holds: a run sees
// only source.Source.
type coreSource struct{ source.Source }

// A run reads through the source it is given: a read that fails mid-run
// fails the run with that error and leaves the copy and the watermark at
// the last page committed before it; the next run goes on from there.
func TestRunThroughSourceInterfaceFailedRead(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	e.src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-01 09:00:00+00'::timestamptz + g * interval '1 second', 'o' || g, g
		FROM generate_series(1, 100) g`)
	c := e.config(t, "public.orders", 10, "")
	var src *failingSource
	o := syncer.Options{Config: c, Store: e.store, FirstLoad: &syncer.FirstLoadOptions{},
		OpenSource: func(ctx context.Context, c *config.Config) (source.Source, error) {
			r, err := source.Open(ctx, c)
			if err != nil {
				return nil, err
			}
			src = &failingSource{Reader: r, failAt: 4}
			return src, nil
		}}
	_, err := syncer.Run(context.Background(), o)
	if !errors.Is(err, errInjected) {
		t.Fatalf("run: %v, want the injected read failure", err)
	}
	if src.reads != 4 {
		t.Fatalf("the run read %d pages through the wrapper, want 4 (the 4th failed)", src.reads)
	}
	// Pages 1 to 3 committed: exactly ids 1 to 30, and the watermark at
	// the 30th row.
	want := slices.DeleteFunc(tableText(t, e.src, "orders", "t.*"), func(r string) bool {
		id, _ := strconv.Atoi(strings.Fields(r)[0])
		return id > 30
	})
	if got := tableText(t, e.dst, "public.copy", "t.*"); !slices.Equal(got, want) {
		t.Fatalf("copy after the failed read holds %d rows %v..., want the 30 rows of the 3 pages committed", len(got), first(got))
	}
	st, _, err := e.store.Get("test")
	if err != nil {
		t.Fatal(err)
	}
	if wantCur := []string{"2026-10-01 09:00:30+00", "30"}; !slices.Equal(st.Cursor, wantCur) {
		t.Fatalf("watermark %v after the failed read, want %v (the last committed page's)", st.Cursor, wantCur)
	}
	// The next run, through the PostgreSQL source, goes on from there.
	res := e.run(t, c, syncer.Options{FirstLoad: &syncer.FirstLoadOptions{}})
	if res.Rows != 70 {
		t.Fatalf("the next run read %d rows, want the 70 after the watermark", res.Rows)
	}
	e.assertSame(t, "orders", "t.*")
}

// A source with none of the PostgreSQL capabilities (no bound settling,
// outside pass, schema following, catalog identity, first load) still
// copies the table exactly.
func TestRunThroughCoreSource(t *testing.T) {
	e := newEnv(t)
	e.src.Exec(t, ordersDDL)
	e.src.Exec(t, `INSERT INTO orders SELECT g, '2026-10-01 09:00:00+00'::timestamptz + (g % 7) * interval '1 second', 'o' || g, g
		FROM generate_series(1, 95) g`)
	c := e.config(t, "public.orders", 10, "")
	res := e.run(t, c, syncer.Options{OpenSource: func(ctx context.Context, c *config.Config) (source.Source, error) {
		r, err := source.Open(ctx, c)
		if err != nil {
			return nil, err
		}
		return coreSource{r}, nil
	}})
	if res.Rows != 95 || res.Pages != 10 {
		t.Fatalf("read %d rows in %d pages, want 95 rows in 10 pages", res.Rows, res.Pages)
	}
	e.assertSame(t, "orders", "t.*")
}
