package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const valid = `name: customers
schedule: "@every 30s"
source:
  dsn: postgres://u@127.0.0.1/src
  table: public.customers
  cursor: [updated_at, id]
  columns: [id, updated_at, name]
  where: "tenant_id = 7"
  lookback: 5s
  page_size: 500
sink:
  type: postgres
  dsn: postgres://u@127.0.0.1/dst
  table: public.customers_copy
  key: [id]
`

func TestParseValid(t *testing.T) {
	c, err := Parse("customers.yaml", []byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "customers" || c.Source.PageSize != 500 || c.Source.Lookback.Duration != 5*time.Second ||
		c.Source.Where != "tenant_id = 7" || c.Sink.Key[0] != "id" || c.Source.Bound != BoundAll {
		t.Fatalf("decoded %+v", c)
	}
}

func TestFirstLoadKeys(t *testing.T) {
	c, err := Parse("c.yaml", []byte(strings.Replace(valid, "  page_size: 500", "  page_size: 500\n  first_load: {workers: 0, chunk_size: 128kB, min_table_size: 1GB}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if f := c.Source.FirstLoad; f.Workers == nil || *f.Workers != 0 || f.ChunkSize.Bytes != 128<<10 || f.MinTableSize.Bytes != 1<<30 {
		t.Fatalf("first_load decoded as %+v", f)
	}
	c, err = Parse("c.yaml", []byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if f := c.Source.FirstLoad; f.Workers == nil || *f.Workers < 1 || *f.Workers > MaxFirstLoadWorkers || f.ChunkSize.Bytes != DefaultFirstLoadChunk || f.MinTableSize.Bytes != DefaultFirstLoadMinTable {
		t.Fatalf("first_load defaults: %+v", f)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse("d.yaml", []byte(`name: d
source: {dsn: x, table: orders, cursor: [updated_at, order_id]}
sink: {dsn: y, table: orders_copy}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Schedule != DefaultSchedule || c.Source.PageSize != DefaultPageSize || c.Source.Lookback.Duration != DefaultLookback ||
		c.Sink.Type != SinkPostgres || strings.Join(c.Sink.Key, ",") != "order_id" || c.SchemaChanges != SchemaEvolve {
		t.Fatalf("defaults not applied: %+v", c)
	}
	if tb, _ := ParseTable(c.Source.Table); tb.Schema != "public" || tb.Name != "orders" {
		t.Fatalf("table %+v", tb)
	}
}

// Each bad input names the file, the line and the key, and is an ErrInvalid.
// coupon is a campaign without sink.grant_page_size.
const coupon = `name: comeback
source:
  dsn: postgres://u@127.0.0.1/src
  table: public.members
  cursor: [member_id]
  where: "last_purchase_at < :as_of - interval '180 days'"
  page_size: 500
sink:
  type: coupon_grants
  dsn: postgres://u@127.0.0.1/src
  table: public.coupon_grants
  campaign: comeback-2026-10
`

// TestGrantPageSize: a campaign's grant pages take sink.grant_page_size
// when it is set, else source.page_size when the file sets it (files
// written before grant_page_size keep their page size), else
// DefaultGrantPageSize.
func TestGrantPageSize(t *testing.T) {
	noPageSize := strings.Replace(coupon, "  page_size: 500\n", "", 1)
	for _, tc := range []struct {
		file     string
		pageSize int
		want     int
	}{
		{coupon, 500, 500},
		{coupon + "  grant_page_size: 1000\n", 500, 1000},
		{noPageSize, DefaultPageSize, DefaultGrantPageSize},
		{noPageSize + "  grant_page_size: 7\n", DefaultPageSize, 7},
	} {
		c, err := Parse("c.yaml", []byte(tc.file))
		if err != nil {
			t.Fatal(err)
		}
		if c.Source.PageSize != tc.pageSize || c.Sink.GrantPageSize != tc.want {
			t.Fatalf("%s: page_size %d, grant_page_size %d; want %d and %d", tc.file, c.Source.PageSize, c.Sink.GrantPageSize, tc.pageSize, tc.want)
		}
	}
}

func TestErrorsNameFileLineKey(t *testing.T) {
	t.Setenv("SYNCD_TEST_SET", "postgres://x")
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown key", strings.Replace(valid, "  page_size: 500", "  page_size: 500\n  pagesize: 3", 1),
			`c.yaml:11: source.pagesize: unknown key`},
		{"wrong type", strings.Replace(valid, "page_size: 500", "page_size: lots", 1),
			`c.yaml:10: source.page_size: want a whole number, got "lots"`},
		{"list expected", strings.Replace(valid, "cursor: [updated_at, id]", "cursor: updated_at", 1),
			`c.yaml:6: source.cursor: want a list`},
		{"bad duration", strings.Replace(valid, "lookback: 5s", "lookback: five", 1),
			`c.yaml:9: source.lookback: want a duration`},
		{"unset variable", strings.Replace(valid, "dsn: postgres://u@127.0.0.1/src", "dsn: ${SYNCD_TEST_UNSET_VAR}", 1),
			`c.yaml:4: source.dsn: environment variable SYNCD_TEST_UNSET_VAR is not set`},
		{"malformed", "name: [a\nsource: {", `c.yaml:`},
		{"missing name", strings.Replace(valid, "name: customers\n", "", 1), `c.yaml: name: missing`},
		{"bad schedule", strings.Replace(valid, `"@every 30s"`, `"every thirty"`, 1), `c.yaml:2: schedule: "every thirty" is not a cron schedule`},
		{"cursor not in columns", strings.Replace(valid, "columns: [id, updated_at, name]", "columns: [id, name]", 1),
			`c.yaml:7: source.columns: cursor column "updated_at" must be listed in columns`},
		{"unknown sink type", strings.Replace(valid, "type: postgres", "type: mysql", 1), `c.yaml:12: sink.type: "mysql": use postgres or coupon_grants`},
		{"page size zero", strings.Replace(valid, "page_size: 500", "page_size: 0", 1), `c.yaml:10: source.page_size: must be at least 1`},
		{"bad schema_changes", strings.Replace(valid, "sink:\n", "schema_changes: ignore\nsink:\n", 1), `c.yaml:11: schema_changes: "ignore": use evolve or fail`},
		{"schema_changes under source", strings.Replace(valid, "  page_size: 500", "  page_size: 500\n  schema_changes: fail", 1),
			`c.yaml:11: source.schema_changes: unknown key`},
		{"duplicate key", strings.Replace(valid, "name: customers\n", "name: customers\nname: again\n", 1), `c.yaml:2: name: key given twice`},
		{"first_load workers negative", strings.Replace(valid, "  page_size: 500", "  page_size: 500\n  first_load: {workers: -1}", 1),
			`c.yaml:11: source.first_load.workers: -1 is out of range; use 0 (no first load) to 64`},
		{"first_load chunk size not a size", strings.Replace(valid, "  page_size: 500", "  page_size: 500\n  first_load:\n    chunk_size: big", 1),
			`c.yaml:12: source.first_load.chunk_size: want a size such as 16MB, 512kB or 1GB, got "big"`},
		{"first_load chunk below a page", strings.Replace(valid, "  page_size: 500", "  page_size: 500\n  first_load:\n    chunk_size: 1kB", 1),
			`c.yaml:12: source.first_load.chunk_size: 1kB is below one 8kB page; use for example 16MB`},
		{"lock_timeout not a duration", valid + "  lock_timeout: soon\n", `c.yaml:16: sink.lock_timeout: want a duration such as 5s, 250ms or 1h, got "soon"`},
		{"negative statement_timeout", valid + "  statement_timeout: -1s\n", `c.yaml:16: sink.statement_timeout: want a duration`},
		{"sub-millisecond lock_timeout", valid + "  lock_timeout: 500us\n", `c.yaml:16: sink.lock_timeout: 500µs: use whole milliseconds (at least 1ms), or 0 for no limit`},
		{"statement_timeout too long", valid + "  statement_timeout: 1000h\n", `c.yaml:16: sink.statement_timeout: 1000h0m0s is more than PostgreSQL takes`},
		{"page_timeout within lock_timeout", valid + "  page_timeout: 10s\n", `c.yaml:16: sink.page_timeout: sink.lock_timeout 30s is not shorter than sink.page_timeout 10s`},
		{"lock_timeout none with a page deadline", valid + "  lock_timeout: 0\n", `c.yaml:16: sink.lock_timeout: sink.lock_timeout 0 (no limit) is not shorter than sink.page_timeout 10m0s`},
		{"grant_page_size on a table copy", valid + "  grant_page_size: 100\n", `c.yaml:16: sink.grant_page_size: only a coupon_grants sink has grant pages`},
		{"grant_page_size zero", coupon + "  grant_page_size: 0\n", `c.yaml:13: sink.grant_page_size: 0 is out of range; use 1 to 1000000`},
		{"reconcile without a schedule", valid + "reconcile:\n  repair: true\n", `c.yaml: reconcile.schedule: missing; say when the daemon reconciles`},
		{"bad keys_schedule", valid + "reconcile:\n  keys_schedule: often\n", `c.yaml:17: reconcile.keys_schedule: "often" is not a cron schedule`},
		{"keys_schedule on a campaign", coupon + "reconcile:\n  keys_schedule: \"@every 5m\"\n", `c.yaml:14: reconcile.keys_schedule: the key check is a table copy's`},
		{"grant_page_size too big", coupon + "  grant_page_size: 1000001\n", `c.yaml:13: sink.grant_page_size: 1000001 is out of range`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error\n %s\nwant prefix\n %s", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

// The sink's timeouts default to sane limits, and 0 turns each off.
func TestSinkTimeouts(t *testing.T) {
	c, err := Parse("c.yaml", []byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if k := c.Sink; k.LockTimeout.Duration != 30*time.Second || k.StatementTimeout.Duration != 10*time.Minute || k.PageTimeout.Duration != 10*time.Minute {
		t.Fatalf("default timeouts %v %v %v", k.LockTimeout, k.StatementTimeout, k.PageTimeout)
	}
	c, err = Parse("c.yaml", []byte(valid+"  lock_timeout: 250ms\n  statement_timeout: 0\n  page_timeout: 1m\n"))
	if err != nil {
		t.Fatal(err)
	}
	if k := c.Sink; k.LockTimeout.Duration != 250*time.Millisecond || k.StatementTimeout.Duration != 0 || k.PageTimeout.Duration != time.Minute {
		t.Fatalf("timeouts %v %v %v", k.LockTimeout, k.StatementTimeout, k.PageTimeout)
	}
	c, err = Parse("c.yaml", []byte(valid+"  lock_timeout: 0\n  page_timeout: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Sink.LockTimeout.Duration != 0 || c.Sink.PageTimeout.Duration != 0 {
		t.Fatalf("0 did not turn the limits off: %v %v", c.Sink.LockTimeout, c.Sink.PageTimeout)
	}
}

func TestVariablesExpand(t *testing.T) {
	t.Setenv("SRC_DSN", "postgres://a@h/src")
	c, err := Parse("v.yaml", []byte(strings.Replace(valid, "dsn: postgres://u@127.0.0.1/src", "dsn: ${SRC_DSN}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.DSN != "postgres://a@h/src" {
		t.Fatalf("dsn %q", c.Source.DSN)
	}
}

func TestDSNFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "dsn")
	if err := os.WriteFile(f, []byte("postgres://a:secret@h/src\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(valid, "dsn: postgres://u@127.0.0.1/src", "dsn_file: "+f, 1)
	c, err := Parse("f.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.DSN != "postgres://a:secret@h/src" {
		t.Fatalf("dsn %q", c.Source.DSN)
	}
}

func TestLoadFolderRejectsDuplicateNames(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a.yaml", "b.yml"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(valid), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Load(dir)
	if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `b.yml:1: name: source name "customers" is already used by `+filepath.Join(dir, "a.yaml")) {
		t.Fatalf("error %v", err)
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no *.yaml or *.yml source files") {
		t.Fatalf("empty folder: %v", err)
	}
}

func TestParseTable(t *testing.T) {
	for in, want := range map[string]Table{
		"orders":                {"public", "orders"},
		"Sales.Orders":          {"Sales", "Orders"},
		`"my.schema"."a""b"`:    {"my.schema", `a"b`},
		`public."x; DROP"`:      {"public", "x; DROP"},
		"données.commandes":     {"données", "commandes"},
		`"with space".t`:        {"with space", "t"},
		`public."dotted.name"`:  {"public", "dotted.name"},
		`"only quoted part"`:    {"public", "only quoted part"},
		`s."semi;colon""quote"`: {"s", `semi;colon"quote`},
	} {
		got, err := ParseTable(in)
		if err != nil || got != want {
			t.Errorf("ParseTable(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if back, err := ParseTable(got.String()); err != nil || back != got {
			t.Errorf("ParseTable(%q.String()=%q) = %+v, %v", in, got.String(), back, err)
		}
	}
	for _, bad := range []string{"", "a.b.c", `"open`, `"a"x.b`, ".t", "s."} {
		if _, err := ParseTable(bad); err == nil {
			t.Errorf("ParseTable(%q) accepted", bad)
		}
	}
}

// Every example in configs/ is a valid source file (with its ${VAR}s set).
func TestExampleConfigsLoad(t *testing.T) {
	for _, v := range []string{"SOURCE_DSN", "SINK_DSN", "DEMO_DSN", "MEMBERS_DSN", "GRANTS_DSN"} {
		t.Setenv(v, "postgres://syncd@127.0.0.1:5432/example")
	}
	cfgs, err := Load("../configs")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, c := range cfgs {
		names[c.Name] = true
	}
	for _, want := range []string{"customers", "demo-orders", "comeback-2026-10", "shop"} {
		if !names[want] {
			t.Errorf("configs/ has no source %q (loaded %v)", want, names)
		}
	}
}
