package pgutil_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/pgutil"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// decodeCopyText is an independent reader of COPY's text format, used to
// check the writer: rows end at an unescaped newline, fields at an
// unescaped tab, \N alone is NULL.
func decodeCopyText(t *testing.T, b []byte) [][][]byte {
	t.Helper()
	var rows [][][]byte
	var row [][]byte
	var field []byte
	isNull := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch c {
		case '\t', '\n':
			if isNull {
				row = append(row, nil)
			} else {
				row = append(row, append([]byte{}, field...))
			}
			field, isNull = field[:0], false
			if c == '\n' {
				rows = append(rows, row)
				row = nil
			}
		case '\\':
			i++
			if i == len(b) {
				t.Fatalf("output ends inside an escape: %q", b)
			}
			switch b[i] {
			case '\\':
				field = append(field, '\\')
			case 't':
				field = append(field, '\t')
			case 'n':
				field = append(field, '\n')
			case 'r':
				field = append(field, '\r')
			case 'N':
				if len(field) != 0 || (i+1 < len(b) && b[i+1] != '\t' && b[i+1] != '\n') {
					t.Fatalf("\\N inside a value: %q", b)
				}
				isNull = true
			default:
				t.Fatalf("unexpected escape \\%c in %q", b[i], b)
			}
		case '\r':
			t.Fatalf("raw carriage return in %q", b)
		default:
			field = append(field, c)
		}
	}
	if len(row) != 0 || len(field) != 0 {
		t.Fatalf("output does not end with a newline: %q", b)
	}
	return rows
}

func equalRows(a, b [][][]byte) bool {
	return slices.EqualFunc(a, b, func(x, y [][]byte) bool {
		return slices.EqualFunc(x, y, func(p, q []byte) bool { return (p == nil) == (q == nil) && bytes.Equal(p, q) })
	})
}

// FuzzAppendCopyText: whatever the values hold, the output is one line per
// row, one field per value, and reads back to the values.
func FuzzAppendCopyText(f *testing.F) {
	f.Add([]byte("plain"), []byte("tab\there\nnew\\line\r"), false)
	f.Add([]byte(`\N`), []byte(""), true)
	f.Add([]byte("\\\\t"), []byte("é\x00\xff"), false)
	f.Fuzz(func(t *testing.T, a, b []byte, null bool) {
		if a == nil {
			a = []byte{}
		}
		second := b
		if null {
			second = nil
		} else if second == nil {
			second = []byte{}
		}
		rows := [][][]byte{{a, second}, {second, a, a}}
		var buf bytes.Buffer
		pgutil.AppendCopyText(&buf, rows)
		if got := decodeCopyText(t, buf.Bytes()); !equalRows(got, rows) {
			t.Fatalf("rows %q encoded as %q read back as %q", rows, buf.Bytes(), got)
		}
	})
}

// TestCopyTextThroughPostgreSQL: values full of the characters COPY treats
// specially arrive in PostgreSQL unchanged.
func TestCopyTextThroughPostgreSQL(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	db.Exec(t, `CREATE TABLE c (i int, a text, b text)`)
	alphabet := []rune("ab\t\n\r\\N.é\u2028\"';, ")
	r := rand.New(rand.NewPCG(1, 2))
	var rows [][][]byte
	for i := range 2000 {
		vals := [][]byte{[]byte(strconv.Itoa(i))}
		for range 2 {
			if r.IntN(10) == 0 {
				vals = append(vals, nil)
				continue
			}
			n := r.IntN(12)
			s := make([]rune, n)
			for j := range s {
				s[j] = alphabet[r.IntN(len(alphabet))]
			}
			vals = append(vals, []byte(string(s)))
		}
		rows = append(rows, vals)
	}
	rows = append(rows, [][]byte{[]byte("2000"), []byte(`\N`), []byte(`\\N`)})
	var buf bytes.Buffer
	pgutil.AppendCopyText(&buf, rows)
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Conn().PgConn().CopyFrom(ctx, &buf, "COPY c (i, a, b) FROM STDIN"); err != nil {
		t.Fatal(err)
	}
	res, err := conn.Query(ctx, `SELECT a, b FROM c ORDER BY i`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(res, func(r pgx.CollectableRow) ([]*string, error) {
		var a, b *string
		err := r.Scan(&a, &b)
		return []*string{a, b}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows) {
		t.Fatalf("%d rows came back, want %d", len(got), len(rows))
	}
	for i, row := range rows {
		for j, v := range row[1:] {
			g := got[i][j]
			if (v == nil) != (g == nil) || (g != nil && *g != string(v)) {
				t.Fatalf("row %d value %d: sent %q, stored %v", i, j, v, g)
			}
		}
	}
}
