package configdoc

import (
	"fmt"
	"strings"
	"time"

	"github.com/syncd/syncd/config"
)

// doc describes one key of a source file. The key's type comes from the
// config structs; everything else is said here.
type doc struct {
	// Default is the value syncd uses when the key is left out, as written
	// in YAML; it also becomes the schema's default. Empty: none, or one
	// that depends on other keys (then DefaultText says it).
	Default string
	// DefaultText is a default that no literal can say ("the last cursor
	// column"); shown instead of Default.
	DefaultText string
	// Required says when the key must be given: "yes", or a condition.
	Required string
	// Text says what the key does (Markdown; the schema's description).
	Text string
	// Example is a value as written in YAML.
	Example string
	// Enum lists the values a string key takes.
	Enum []string
	// Min and Max bound an integer key.
	Min, Max *int
}

func intp(n int) *int { return &n }

// dur writes d as a config file would: 10m, not 10m0s.
func dur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func size(n int64) string { return config.Size{Bytes: n}.String() }

// docs describes every key the loader accepts, by its dotted path. A key
// added to the config structs needs an entry here (TestEveryKeyDocumented);
// then run make docs.
var docs = map[string]doc{
	"name": {
		Required: "yes",
		Text:     "Unique source name (letters, digits, `.`, `_`, `-`; at most 128), unique across every file loaded together. The watermark is kept under it in the state file, so renaming a source starts it from scratch.",
		Example:  "customers",
	},
	"schedule": {
		Default: config.DefaultSchedule,
		Text:    "When the daemon (`syncd run` without `--once`) runs the source: a five-field cron spec (`*/5 * * * *`), a descriptor (`@hourly`, `@daily`) or `@every 30s`, optionally prefixed with `CRON_TZ=Europe/Paris`. A tick that finds the previous run still going is skipped. Table sources also run once when the daemon starts; coupon campaigns wait for their schedule.",
		Example: `"@every 30s"`,
	},
	"source": {
		Required: "yes",
		Text:     "The table syncd reads from, and how it pages through it.",
	},
	"source.dsn": {
		Required: "this or `source.dsn_file`",
		Text:     "Connection string of the source database (`postgres://...` or `key=value`). Write `${VAR}` so the password stays out of the file: the variable is read from the environment, and an unset one is an error. Give `dsn` or `dsn_file`, not both.",
		Example:  "${SOURCE_DSN}",
	},
	"source.dsn_file": {
		Required: "this or `source.dsn`",
		Text:     "A file holding the source connection string, instead of `dsn` (for example a mounted Secret). Surrounding blanks are trimmed; an empty file is an error.",
		Example:  "/run/secrets/source_dsn",
	},
	"source.table": {
		Required: "yes",
		Text:     "`schema.table` (the schema defaults to `public`). Names are exact catalog names, case included; quote a part containing a dot: `\"my.schema\".\"Order Lines\"`. A `*` in the table part makes it a pattern of tables (`public.*`, `sales.order_*`): every matching table is synced as its own source, see [PATTERNS.md](PATTERNS.md).",
		Example:  "public.customers",
	},
	"source.exclude": {
		Text:    "With a pattern `source.table` only: patterns of tables not to take. A pattern without a schema is in the pattern's schema.",
		Example: `["*_old", "tmp_*", schema_migrations]`,
	},
	"source.cursor": {
		Required: "yes, unless `mode: compare`",
		Text: "The ordering columns; the last must be unique in the source (a primary key or unique index on it): it breaks ties between equal timestamps, so a page boundary never falls inside a tie. Pages are read with `WHERE (updated_at, id) > ($1, $2) ORDER BY updated_at, id LIMIT n`; index the columns in this order.\n\n" +
			"Types: timestamptz, timestamp, date, integers, numeric, text, varchar, uuid. The first column must be one the read bound can make commit-safe: a date or timestamp, or an integer filled by an identity column or a `nextval()` default of a sequence with `CACHE 1` (a `bigserial`). Any other first column (text, uuid, numeric, an integer the application fills) is refused (exit 2) unless `source.bound: off`.\n\n" +
			"Cursor columns should be `NOT NULL`: rows with a NULL cursor value, and rows whose first cursor column lies more than a minute past the source's clock (`infinity`, a wrong year), are out of the cursor's reach; each run copies them in an extra pass and reports them ([WATERMARK.md](WATERMARK.md#rows-the-cursor-cannot-reach)).",
		Example: "[updated_at, id]",
	},
	"source.columns": {
		DefaultText: "every column",
		Text:        "The columns to copy; must include the cursor, the sink key and `deleted_column`. With it set, schema changes of the other columns are not watched.",
		Example:     "[id, updated_at, name, email]",
	},
	"source.where": {
		Text:    "An SQL boolean expression on the source table that filters the rows to copy. For a `coupon_grants` sink, `:as_of` in it is bound to the campaign's frozen start ([COUPONS.md](COUPONS.md)).",
		Example: `"tenant_id = 7"`,
	},
	"source.lookback": {
		Default:     dur(config.DefaultLookback),
		DefaultText: "`5s` (`0s` for a `coupon_grants` sink or `mode: compare`, which refuse any other value)",
		Text:        "How far behind the watermark each run reads again, for application clocks that run behind the database; re-read rows are upserted again, which changes nothing. Only for a date or timestamp first cursor column. With a bound that sees every writer, only as far back as `lookback` before the last run's bound, so an idle run reads nothing ([WATERMARK.md](WATERMARK.md)).",
		Example:     "5s",
	},
	"source.page_size": {
		Default: fmt.Sprint(config.DefaultPageSize),
		Min:     intp(1), Max: intp(1_000_000),
		Text:    "Rows per page; each page is one sink transaction.",
		Example: "1000",
	},
	"source.page_bytes": {
		Default: size(config.DefaultPageBytes),
		Text:    "Bytes per page (`64kB` to `1GB`): a page also ends at the row that would take its values past this size, and a larger row makes a page alone. So memory follows the bytes, not the row count: a run's peak RSS stays near 7 times the larger of `page_bytes` and the widest row, plus about 15 MB ([HOW-IT-WORKS.md](HOW-IT-WORKS.md#memory)).",
		Example: "16MB",
	},
	"source.deleted_column": {
		Text:    "A soft-delete column: a boolean, or a timestamp set when the row is deleted. Rows flagged deleted are removed from the copy, or kept with their flag with `sink.keep_deleted: true`. Hard deletes are found only by `syncd reconcile` ([RECONCILE.md](RECONCILE.md)).",
		Example: "deleted_at",
	},
	"source.settle": {
		Default: "0s",
		Text:    "Keep the read bound at least this far behind the source's clock.",
		Example: "1s",
	},
	"source.bound": {
		Default: config.BoundAll,
		Enum:    []string{config.BoundAll, config.BoundWriters, config.BoundOff},
		Text: "Which open source transactions hold the commit-safe read bound back. `transactions`: every open transaction, so a transaction that commits late is read by a later run. `writers`: only those that have written (for rows stamped with `clock_timestamp()` or by the application). `off`: none; the watermark still never passes the source's clock plus one minute, and late commits are found only by `syncd reconcile`.\n\n" +
			"`off` also admits a first cursor column that is not commit-ordered, with a warning. The bound needs `pg_read_all_stats` for the source role; without it syncd warns and relies on `lookback` ([WATERMARK.md](WATERMARK.md)).",
		Example: "transactions",
	},
	"source.first_load": {
		Text: "The first load of an empty copy without a watermark: one exported snapshot, the source table's heap split into chunks, several chunks at once, each streamed by binary `COPY` into the copy in one transaction. A crash redoes only the chunks in flight ([RELIABILITY.md](RELIABILITY.md#first-load-of-an-empty-copy)).",
	},
	"source.first_load.workers": {
		DefaultText: fmt.Sprintf("the number of CPUs, at most %d", config.MaxFirstLoadWorkers),
		Min:         intp(0), Max: intp(64),
		Text:    "How many chunks the first load copies at once. `0` turns the first load off, so pages fill the copy.",
		Example: "2",
	},
	"source.first_load.chunk_size": {
		Default: size(config.DefaultFirstLoadChunk),
		Text:    "The heap size of one first-load chunk (at least `8192`, e.g. `512kB`, `16MB`, `1GB`): the unit of commit, and what a crash redoes.",
		Example: "64MB",
	},
	"source.first_load.min_table_size": {
		Default: size(config.DefaultFirstLoadMinTable),
		Text:    "The smallest source table (heap size) that gets a first load; smaller ones are copied by pages.",
		Example: "16MB",
	},
	"sink": {
		Required: "yes",
		Text:     "Where rows (or coupon grants) are written.",
	},
	"sink.type": {
		Default: config.SinkPostgres,
		Enum:    []string{config.SinkPostgres, config.SinkCouponGrants},
		Text:    "`postgres`: an upserted copy of the table. `coupon_grants`: one coupon per target of a frozen target set ([COUPONS.md](COUPONS.md)).",
		Example: "postgres",
	},
	"sink.dsn": {
		Required: "this or `sink.dsn_file`",
		Text:     "Connection string of the sink database, as `source.dsn`.",
		Example:  "${SINK_DSN}",
	},
	"sink.dsn_file": {
		Required: "this or `sink.dsn`",
		Text:     "A file holding the sink connection string, instead of `dsn`.",
		Example:  "/run/secrets/sink_dsn",
	},
	"sink.table": {
		Required: "yes",
		Text:     "The copy (or the grants table), created when missing ([HOW-IT-WORKS.md](HOW-IT-WORKS.md#creating-the-copy)). An existing copy needs every copied column, each of a type that holds the source's values exactly, and a unique index on `key`. With a pattern `source.table` it holds one `*`, replaced by each table's name (`copy.*`, `public.*_copy`); a `*` is refused otherwise.",
		Example:  "public.customers_copy",
	},
	"sink.key": {
		DefaultText: "the last cursor column; for a pattern source or `mode: compare`, the table's primary key; for `coupon_grants`, the cursor",
		Text:        "The upsert key: `INSERT ... ON CONFLICT (key) DO UPDATE`. The copy needs a unique index on it. Its columns must be `NOT NULL` in the source table and in the copy (a unique index allows any number of NULLs): otherwise `validate` and `run` exit 2, also when the column holds no NULL today.",
		Example:     "[id]",
	},
	"sink.keep_deleted": {
		Default: "false",
		Text:    "With `source.deleted_column`: keep soft-deleted rows in the copy, with their flag, instead of deleting them.",
		Example: "true",
	},
	"sink.create_extensions": {
		Default: "false",
		Text:    "Let syncd run `CREATE EXTENSION IF NOT EXISTS name SCHEMA schema` in the sink database for the extensions whose types the source's columns use (citext, hstore, PostGIS...) when the sink lacks them and the sink role may (a superuser, or a trusted extension and `CREATE` on the database). Off, a missing extension is refused (exit 2) with the statement to run ([HOW-IT-WORKS.md](HOW-IT-WORKS.md#creating-the-copy)).",
		Example: "true",
	},
	"sink.campaign": {
		Required: "with `type: coupon_grants`",
		Text:     "The campaign id of a `coupon_grants` sink (letters, digits, `.`, `_`, `-`); refused on a `postgres` sink.",
		Example:  "comeback-2026-10",
	},
	"sink.lock_timeout": {
		Default: dur(config.DefaultLockTimeout),
		Text:    "How long one statement on a sink connection waits for a lock another session holds (PostgreSQL's `lock_timeout`); `0` is no limit of syncd's own. Must be shorter than `sink.page_timeout`. A copy (or grants table) locked longer fails the run with one line naming the table and the session holding it; the fault is transient, so the daemon tries again with backoff, releasing the run lock between attempts. Each sink session uses the stricter of this and what the server, database, role or DSN already set ([CONFIG.md](CONFIG.md#sink-sessions-and-timeouts)).",
		Example: "30s",
	},
	"sink.statement_timeout": {
		Default: dur(config.DefaultStatementTimeout),
		Text:    "The longest one statement on a sink connection may run (PostgreSQL's `statement_timeout`), the ANALYZE of a freshly filled copy and reconcile's sink side included; `0` is no limit of syncd's own.",
		Example: "10m",
	},
	"sink.page_timeout": {
		Default: dur(config.DefaultPageTimeout),
		Text:    "The deadline of applying one page, its commit included; a page past it is cancelled on the server and rolls back, and the run fails with a transient fault (`page_timeout`). `0` is none.",
		Example: "10m",
	},
	"sink.grant_page_size": {
		DefaultText: fmt.Sprintf("`source.page_size` when the file sets it, else %d", config.DefaultGrantPageSize),
		Min:         intp(1), Max: intp(1_000_000),
		Text:    "`coupon_grants` only: the targets one grant page grants, by one `INSERT ... SELECT` from the frozen targets on the sink's server and one durable commit. Refused on a `postgres` sink.",
		Example: "50000",
	},
	"reconcile": {
		Text: "A value-level reconcile of this source run by the daemon ([RECONCILE.md](RECONCILE.md)).",
	},
	"reconcile.schedule": {
		Required: "with `reconcile`, unless `reconcile.keys_schedule` is set",
		Text:     "When the daemon reconciles the source: a cron spec, as `schedule`.",
		Example:  `"0 3 * * *"`,
	},
	"reconcile.repair": {
		Default: "false",
		Text:    "Let the scheduled reconcile and key check repair what they find (as `syncd reconcile --repair`; the key check deletes the copy's extra rows only).",
		Example: "true",
	},
	"reconcile.keys_schedule": {
		Text:    "When the daemon checks the source's and the copy's key sets only (`syncd reconcile --keys`, [RECONCILE.md](RECONCILE.md#key-check)): a cron spec, as `schedule`. Far cheaper than the full reconcile (it reads the key indexes), so it can run far more often: it finds rows deleted at the source and, with `repair: true`, deletes them from the copy. Refused on a `coupon_grants` sink and in `mode: compare`.",
		Example: `"@every 5m"`,
	},
	"mode": {
		Default: config.ModeCursor,
		Enum:    []string{config.ModeCursor, config.ModeCompare, config.ModeAuto},
		Text:    "How a run finds what to write. `cursor` reads the rows changed since the watermark by `source.cursor`. `compare` needs no cursor (a lookup table, an audit log without `updated_at`): each run compares the whole source table with its copy by checksummed key ranges, as `syncd reconcile --repair` does, and writes only the differences (inserts, updates and hard deletes), so the copy equals the source at the end of each run; it takes no `source.cursor` or `source.lookback`, rows are matched by `sink.key` (default: the table's primary key), and each run reads both tables' checksums, so it suits small and medium tables. `auto`, for a pattern source only: each matched table with the cursor columns is read by the cursor, and one without a usable cursor but with a key is synced in `compare` mode instead of being skipped; `validate` says which mode each table gets ([PATTERNS.md](PATTERNS.md#tables-without-a-cursor)).",
		Example: config.ModeCompare,
	},
	"schema_changes": {
		Default: config.SchemaEvolve,
		Enum:    []string{config.SchemaEvolve, config.SchemaFail},
		Text:    "What a run does when the source table's columns changed: `evolve` follows the safe changes in the copy (adds and backfills columns, widens types, keeps dropped columns) and stops at the others with the fix; `fail` stops the source at any change and alters nothing ([SCHEMA-CHANGES.md](SCHEMA-CHANGES.md)).",
		Example: "evolve",
	},
	"tables": {
		Text:    "Settings for some of the tables a pattern source matches (a pattern `source.table` only), by table name (the name only, without the schema): each key given there replaces the pattern's for that table, the others are the pattern's. A name the pattern does not match, or one `source.exclude` excludes, is a config error; a name no table of the source has is a warning of `validate` and `run --once`, naming its line (a table created later takes the settings). See [PATTERNS.md](PATTERNS.md#settings-for-some-tables).",
		Example: "{film: {cursor: [last_update, film_id]}, payment: {key: [payment_id, payment_date]}}",
	},
	"tables.TABLE.cursor": {
		Text:    "This table's cursor instead of `source.cursor`, taken as written: it must end in a unique column (no primary key is appended to it). Give it to a table that lacks the pattern's cursor column, or whose cursor should differ.",
		Example: "[last_update, film_id]",
	},
	"tables.TABLE.key": {
		Text:    "This table's `sink.key` (the copy's primary key) instead of the pattern's `sink.key` or the table's primary key.",
		Example: "[payment_id, payment_date]",
	},
	"tables.TABLE.columns": {
		Text:    "This table's `source.columns`: the columns copied; they must include its cursor and key columns.",
		Example: "[customer_id, first_name, last_name, last_update]",
	},
	"tables.TABLE.where": {
		Text:    "This table's `source.where` instead of the pattern's.",
		Example: "\"active\"",
	},
	"tables.TABLE.deleted_column": {
		Text:    "This table's `source.deleted_column` instead of the pattern's.",
		Example: "deleted_at",
	},
	"tables.TABLE.schedule": {
		Text:    "When the daemon runs this table, instead of the pattern's `schedule` (which still says when the pattern is matched again against the catalog).",
		Example: "\"@every 10m\"",
	},
	"tables.TABLE.exclude": {
		DefaultText: "`false`",
		Text:        "`true` leaves the table out, as a `source.exclude` pattern naming it would (then give it no other key).",
		Example:     "true",
	},
}
