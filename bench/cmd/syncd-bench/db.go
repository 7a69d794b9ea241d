package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgutil"
)

// bench holds the two databases (source and sink) and the scratch folder
// of one benchmark session.
type bench struct {
	o            *options
	env          []string // added to syncd's environment
	pagesOnly    bool     // write first_load: {workers: 0} into the initial sync's config
	admin        *pgx.Conn
	srcDB, dstDB string
	src, dst     *pgx.Conn
	dir          string
	rows         int   // rows in the source table items
	heap, total  int64 // its size in bytes, without and with indexes
}

func newBench(ctx context.Context, o *options) (*bench, error) {
	admin, err := pgx.Connect(ctx, o.adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", pgutil.Describe(o.adminURL), err)
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	tag := fmt.Sprintf("%d_%s", os.Getpid(), hex.EncodeToString(suffix))
	b := &bench{o: o, admin: admin, srcDB: "syncd_bench_src_" + tag, dstDB: "syncd_bench_dst_" + tag}
	b.dir, err = os.MkdirTemp("", "syncd-bench-")
	if err != nil {
		return nil, err
	}
	for _, db := range []string{b.srcDB, b.dstDB} {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
			b.cleanup()
			return nil, fmt.Errorf("create database %s: %w", db, err)
		}
	}
	if b.src, err = pgx.Connect(ctx, b.url(b.srcDB)); err == nil {
		b.dst, err = pgx.Connect(ctx, b.url(b.dstDB))
	}
	if err != nil {
		b.cleanup()
		return nil, err
	}
	return b, nil
}

// cleanup drops the databases and the scratch folder; it runs even when
// the session was interrupted.
func (b *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []*pgx.Conn{b.src, b.dst} {
		if c != nil {
			c.Close(ctx)
		}
	}
	if !b.o.keep {
		for _, db := range []string{b.srcDB, b.dstDB} {
			if _, err := b.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
				fmt.Fprintf(os.Stderr, "syncd-bench: drop database %s: %v; drop it by hand\n", db, err)
			}
		}
		os.RemoveAll(b.dir)
	} else {
		fmt.Fprintf(os.Stderr, "syncd-bench: kept databases %s, %s and folder %s\n", b.srcDB, b.dstDB, b.dir)
	}
	b.admin.Close(ctx)
}

// url is the admin URL pointed at database db.
func (b *bench) url(db string) string { return pgutil.WithDatabase(b.o.adminURL, db) }

// itemsDDL is the benchmark table: bigint id, a timestamptz cursor with
// about 40% of the rows sharing one value, text, numeric(12,2), text[] and
// jsonb, about 270 bytes a row.
func itemsDDL(name string) string {
	return `CREATE TABLE ` + name + ` (
  id bigint PRIMARY KEY,
  updated_at timestamptz NOT NULL,
  name text,
  price numeric(12,2),
  tags text[],
  attrs jsonb
)`
}

const itemCols = "id, updated_at, name, price, tags, attrs"

// fill inserts ids [from, to] into table t of conn. Ids whose last digit
// of base 5 is 0 or 1 (40%) share one updated_at in the middle of the
// range; the others advance 137 ms per id.
func fill(ctx context.Context, conn *pgx.Conn, t string, from, to int) error {
	const chunk = 250_000
	for lo := from; lo <= to; lo += chunk {
		hi := min(to, lo+chunk-1)
		_, err := conn.Exec(ctx, `INSERT INTO `+t+` (`+itemCols+`)
SELECT i,
  CASE WHEN i % 5 < 2 THEN timestamptz '2026-01-01 00:00:00+00'
       ELSE timestamptz '2025-12-31 00:00:00+00' + i * interval '137 milliseconds' + (i % 1000) * interval '1 microsecond' END,
  'customer ' || md5(i::text) || ' of region ' || (i % 97),
  ((i * 7919) % 10000000) / 100.0,
  ARRAY['tag' || (i % 17), 'segment-' || (i % 31), substr(md5((i * 3)::text), 1, 12)],
  jsonb_build_object('plan', (ARRAY['free','pro','team','enterprise'])[1 + i % 4], 'score', i % 1000,
    'note', md5((i * 7)::text), 'flags', jsonb_build_array(i % 2 = 0, i % 3 = 0), 'visits', i % 250)
FROM generate_series($1::bigint, $2::bigint) i`, lo, hi)
		if err != nil {
			return fmt.Errorf("fill %s: %w", t, err)
		}
	}
	return nil
}

// syncdResult is one run of the syncd binary.
type syncdResult struct {
	wall   time.Duration
	maxRSS int64 // bytes
	stdout []byte
	exit   int
}

// syncd runs the binary and reports its wall time and peak RSS.
func (b *bench) syncd(ctx context.Context, args ...string) (syncdResult, error) {
	cmd := exec.CommandContext(ctx, b.o.syncd, args...)
	cmd.Env = append(os.Environ(), b.env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := syncdResult{wall: time.Since(start), stdout: out.Bytes()}
	if cmd.ProcessState != nil {
		r.exit = cmd.ProcessState.ExitCode()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			r.maxRSS = ru.Maxrss * 1024
		}
	}
	if err != nil {
		return r, fmt.Errorf("syncd %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return r, nil
}

// writeConfig writes a source file for syncd and returns its path.
func (b *bench) writeConfig(name, body string) (string, error) {
	p := filepath.Join(b.dir, name+".yaml")
	return p, os.WriteFile(p, []byte(body), 0o600)
}

func (b *bench) statePath(name string) string { return filepath.Join(b.dir, name+".db") }

// itemsConfig is the source file that syncs src.items into dst.<sinkTable>.
// A pageSize of 0 leaves page_size out of the file (the default).
func (b *bench) itemsConfig(name, srcTable, sinkTable string, pageSize int, extra string) (string, error) {
	page := ""
	if pageSize > 0 {
		page = fmt.Sprintf("  page_size: %d\n", pageSize)
	}
	return b.writeConfig(name, fmt.Sprintf(`name: %s
schedule: "@every 1s"
source:
  dsn: %s
  table: public.%s
  cursor: [updated_at, id]
%s%ssink:
  dsn: %s
  table: public.%s
  key: [id]
`, name, b.url(b.srcDB), srcTable, page, extra, b.url(b.dstDB), sinkTable))
}

// pipeCopy runs the limit of a bulk copy: psql COPY ... TO STDOUT (FORMAT
// binary) piped into psql COPY ... FROM STDIN (FORMAT binary).
func (b *bench) pipeCopy(ctx context.Context, srcDB, query, dstDB, target string) (time.Duration, error) {
	out := exec.CommandContext(ctx, "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", b.url(srcDB),
		"-c", "COPY ("+query+") TO STDOUT (FORMAT binary)")
	in := exec.CommandContext(ctx, "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", b.url(dstDB),
		"-c", "COPY "+target+" FROM STDIN (FORMAT binary)")
	pipe, err := out.StdoutPipe()
	if err != nil {
		return 0, err
	}
	in.Stdin = pipe
	var e1, e2 bytes.Buffer
	out.Stderr, in.Stderr = &e1, &e2
	start := time.Now()
	if err := out.Start(); err != nil {
		return 0, fmt.Errorf("psql: %w", err)
	}
	if err := in.Start(); err != nil {
		out.Process.Kill()
		out.Wait()
		return 0, fmt.Errorf("psql: %w", err)
	}
	err1 := out.Wait()
	err2 := in.Wait()
	d := time.Since(start)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("psql COPY pipe: %v %v: %s %s", err1, err2, strings.TrimSpace(e1.String()), strings.TrimSpace(e2.String()))
	}
	return d, nil
}

func count(ctx context.Context, conn *pgx.Conn, table string) (int64, error) {
	var n int64
	err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n)
	return n, err
}

// sameContent compares two tables of two databases by an order-independent
// hash of every row.
func sameContent(ctx context.Context, a *pgx.Conn, ta string, b *pgx.Conn, tb string) (bool, error) {
	q := func(c *pgx.Conn, t string) (string, error) {
		var s string
		err := c.QueryRow(ctx, "SELECT count(*)::text || '/' || coalesce(sum(hashtext(x::text)::numeric), 0)::text FROM (SELECT "+itemCols+" FROM "+t+") x").Scan(&s)
		return s, err
	}
	x, err := q(a, ta)
	if err != nil {
		return false, err
	}
	y, err := q(b, tb)
	return x == y, err
}

func execAll(ctx context.Context, conn *pgx.Conn, stmts ...string) error {
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}
