package pgutil_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgtest"
	"github.com/syncd/syncd/internal/pgutil"
)

// A bulk connection (the first load's source side, which reads the
// socket 256 kB at a time) streams a binary COPY byte for byte as a plain
// connection does, rows of every size across its buffer's edges included,
// and runs with syncd's session settings.
func TestConnectBulkStreamsCopyUnchanged(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	db.Exec(t, `CREATE TABLE public.blobs (id int PRIMARY KEY, body text);
INSERT INTO public.blobs SELECT i, repeat(md5(i::text), 1 + (i * 7919) % 600) FROM generate_series(1, 3000) i`)
	stream := func(connect func(context.Context, string, string) (*pgx.Conn, error)) ([32]byte, int) {
		t.Helper()
		conn, err := connect(ctx, db.URL, "source")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var tz string
		if err := conn.QueryRow(ctx, "SELECT current_setting('TimeZone')").Scan(&tz); err != nil || tz != "UTC" {
			t.Fatalf("session TimeZone %q (%v), want UTC", tz, err)
		}
		var buf bytes.Buffer
		if _, err := conn.PgConn().CopyTo(ctx, &buf, "COPY (SELECT * FROM public.blobs ORDER BY id) TO STDOUT (FORMAT binary)"); err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(buf.Bytes()), buf.Len()
	}
	plain, n := stream(pgutil.Connect)
	bulk, m := stream(pgutil.ConnectBulk)
	if n < 10<<20 {
		t.Fatalf("the stream is %d bytes; want more than 10 MB to cross many buffers", n)
	}
	if plain != bulk || n != m {
		t.Fatalf("a bulk connection streamed %d bytes (sha256 %x), a plain one %d (%x)", m, bulk, n, plain)
	}
}
