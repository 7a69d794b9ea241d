// Package config loads syncd's source files: one YAML file per source, or a
// folder of them. It owns the whole pipeline from bytes to a validated
// Config, in this order: file discovery and the unique-name rule (Files,
// LoadEach); a strict decode that rejects unknown keys and wrong types and
// expands ${VAR} references in values through Options.Getenv; defaults for
// the keys left out; normalisation (DSNs read from their files, table names
// parsed once into Source.Ident and Sink.Ident); and checks that name the
// file, the line and the key.
package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid is wrapped by every error that a bad config file causes; the
// CLI maps it to exit code 2.
var ErrInvalid = errors.New("invalid config")

// Sink types.
const (
	SinkPostgres     = "postgres"
	SinkCouponGrants = "coupon_grants"
)

// Bound modes for the commit-safe read bound (source.bound).
const (
	BoundAll     = "transactions" // every open transaction holds the bound back
	BoundWriters = "writers"      // only transactions that have written (backend_xid set)
	BoundOff     = "off"          // no bound: rely on lookback alone
)

// Sync modes (mode).
const (
	// ModeCursor reads the rows changed since the watermark by
	// source.cursor (the default).
	ModeCursor = "cursor"
	// ModeCompare needs no cursor: each run compares the whole source
	// table with its copy by checksummed key ranges (package reconcile)
	// and writes only the differences, hard deletes included.
	ModeCompare = "compare"
	// ModeAuto, for a pattern source: each matched table that has the
	// cursor columns is read by the cursor, and one that lacks a usable
	// cursor but has a key is synced by ModeCompare instead of skipped.
	ModeAuto = "auto"
)

// Schema change policies (schema_changes).
const (
	SchemaEvolve = "evolve" // follow safe changes in the copy
	SchemaFail   = "fail"   // stop the source at any change
)

// Config is one source file.
type Config struct {
	// File is the path the config was read from.
	File string `yaml:"-"`
	// Lines maps a dotted key ("source.cursor") to its line in File.
	Lines map[string]int `yaml:"-"`
	// Pattern is set on a source made from a pattern source (see ForTable):
	// the name of the pattern source it was matched by.
	Pattern string `yaml:"-"`
	// noSecrets: loaded with Options.NoSecrets, the DSNs are as written.
	noSecrets bool
	// sinks are the kinds of sink registered beyond the built-in ones
	// (Options.Sinks).
	sinks map[string]SinkKind
	// CompareWhy, on a source a pattern with mode auto made for a table
	// without a usable cursor, says why that table is in compare mode.
	CompareWhy string `yaml:"-"`

	Name     string `yaml:"name"`
	Schedule string `yaml:"schedule"`
	// Mode is how a run finds what to write: ModeCursor (default),
	// ModeCompare, or for a pattern source ModeAuto.
	Mode      string     `yaml:"mode"`
	Source    Source     `yaml:"source"`
	Sink      Sink       `yaml:"sink"`
	Reconcile *Reconcile `yaml:"reconcile"`
	// SchemaChanges says what a run does when the source's columns no
	// longer match the copy's: SchemaEvolve or SchemaFail.
	SchemaChanges string `yaml:"schema_changes"`
	// Tables overrides a pattern source's settings for some of the tables
	// it matches, by table name (ForTable applies them).
	Tables map[string]TableSettings `yaml:"tables"`
	// CursorNote, on a source made from a pattern source, says where its
	// cursor comes from when it is not source.cursor as written: a
	// tables entry, or the primary key appended as the tie-breaker.
	CursorNote string `yaml:"-"`
}

// TableSettings are the settings a pattern source's tables entry gives one
// table instead of the pattern's own; a key left out keeps the pattern's.
type TableSettings struct {
	Cursor        []string `yaml:"cursor"`
	Key           []string `yaml:"key"`
	Columns       []string `yaml:"columns"`
	Where         string   `yaml:"where"`
	DeletedColumn string   `yaml:"deleted_column"`
	Schedule      string   `yaml:"schedule"`
	// Exclude leaves the table out, as a source.exclude pattern would.
	Exclude bool `yaml:"exclude"`
}

// Compare reports whether c's runs compare the whole table instead of
// reading by a cursor (mode: compare).
func (c *Config) Compare() bool { return c.Mode == ModeCompare }

// Source is the table syncd reads from.
type Source struct {
	DSN     string `yaml:"dsn"`
	DSNFile string `yaml:"dsn_file"`
	// Table is a table, or a pattern of tables such as public.* (see IsPattern).
	Table string `yaml:"table"`
	// Ident is Table parsed once by the loader (for a pattern source its
	// Name holds the *): every package uses it instead of parsing Table.
	Ident Table `yaml:"-"`
	// Exclude lists patterns of tables a pattern Table does not take.
	Exclude []string `yaml:"exclude"`
	// excludes is Exclude parsed once, unqualified ones in Ident's schema.
	excludes []Table
	// Cursor lists the ordering columns; the last one is the unique tie-breaker.
	Cursor  []string `yaml:"cursor"`
	Columns []string `yaml:"columns"`
	Where   string   `yaml:"where"`
	// Lookback is how far behind the watermark each run starts reading again.
	Lookback Duration `yaml:"lookback"`
	PageSize int      `yaml:"page_size"`
	// PageBytes bounds a page by bytes as well (DefaultPageBytes when
	// unset): a page ends early at the row that would take it past this
	// size, or after its first row when that row alone is larger.
	PageBytes Size `yaml:"page_bytes"`
	// DeletedColumn names a soft-delete flag or timestamp column.
	DeletedColumn string `yaml:"deleted_column"`
	// Settle keeps the read bound this far behind the source's clock.
	Settle Duration `yaml:"settle"`
	// Bound selects which open transactions hold the read bound back.
	Bound string `yaml:"bound"`
	// FirstLoad tunes the parallel first load of an empty copy.
	FirstLoad FirstLoad `yaml:"first_load"`
}

// FirstLoad tunes the first load of an empty copy: several workers read one
// exported snapshot of the source table in chunks of its heap, each chunk
// streamed with COPY into the copy in one transaction (docs/RELIABILITY.md,
// "First load of an empty copy").
type FirstLoad struct {
	// Workers is how many chunks are copied at once; 0 turns the first
	// load off, so pages copy the table. Unset: the CPUs, at most 4.
	Workers *int `yaml:"workers"`
	// ChunkSize is the heap size of one chunk (DefaultFirstLoadChunk when
	// unset): the unit of commit, and what a crash redoes.
	ChunkSize Size `yaml:"chunk_size"`
	// MinTableSize is the smallest source table (heap size) that gets a
	// first load (DefaultFirstLoadMinTable when unset); smaller ones are
	// copied by pages.
	MinTableSize Size `yaml:"min_table_size"`
}

// Size is a number of bytes written as 16MB, 512kB, 1GB or 8192 (bytes),
// with PostgreSQL's units (1kB = 1024 bytes).
type Size struct{ Bytes int64 }

// String writes s in the largest unit that divides it.
func (s Size) String() string {
	for _, u := range []struct {
		name string
		n    int64
	}{{"GB", 1 << 30}, {"MB", 1 << 20}, {"kB", 1 << 10}} {
		if s.Bytes >= u.n && s.Bytes%u.n == 0 {
			return fmt.Sprintf("%d%s", s.Bytes/u.n, u.name)
		}
	}
	return fmt.Sprintf("%dB", s.Bytes)
}

// ParseSize reads a Size: a whole number with an optional unit B, kB, MB
// or GB.
func ParseSize(text string) (Size, error) {
	t := strings.TrimSpace(text)
	mult := int64(1)
	for _, u := range []struct {
		name string
		n    int64
	}{{"GB", 1 << 30}, {"MB", 1 << 20}, {"kB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(t, u.name) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.name)), u.n
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<50)/mult {
		return Size{}, fmt.Errorf("want a size such as 16MB, 512kB or 1GB, got %q", text)
	}
	return Size{n * mult}, nil
}

// Sink is where rows (or grants) are written.
type Sink struct {
	Type    string `yaml:"type"`
	DSN     string `yaml:"dsn"`
	DSNFile string `yaml:"dsn_file"`
	Table   string `yaml:"table"`
	// Ident is Table parsed once by the loader (for a pattern source its
	// Name holds the *).
	Ident Table    `yaml:"-"`
	Key   []string `yaml:"key"`
	// KeepDeleted keeps soft-deleted rows in the copy, flagged, instead of deleting them.
	KeepDeleted bool `yaml:"keep_deleted"`
	// CreateExtensions lets syncd run CREATE EXTENSION in the sink database
	// for the extensions whose types the source's columns use, when the
	// sink role may (a superuser, or a trusted extension and CREATE on the
	// database). Off, a missing extension is a config error naming the
	// statement to run.
	CreateExtensions bool `yaml:"create_extensions"`
	// Campaign names a coupon campaign (type coupon_grants).
	Campaign string `yaml:"campaign"`
	// LockTimeout bounds how long one statement on a sink connection waits
	// for a lock another session holds (PostgreSQL's lock_timeout); 0 is
	// no limit of syncd's own.
	LockTimeout Duration `yaml:"lock_timeout"`
	// StatementTimeout bounds one statement on a sink connection
	// (PostgreSQL's statement_timeout); 0 is no limit of syncd's own.
	StatementTimeout Duration `yaml:"statement_timeout"`
	// PageTimeout is the deadline of applying one page, its commit
	// included; 0 is none.
	PageTimeout Duration `yaml:"page_timeout"`
	// GrantPageSize is how many targets one grant page of a coupon campaign
	// grants, in one transaction on the sink's server (type coupon_grants;
	// default: source.page_size when the file sets it, else
	// DefaultGrantPageSize, larger than a table page because the grants'
	// keys never travel through syncd).
	GrantPageSize int `yaml:"grant_page_size"`
	// Settings holds the keys of a kind registered through Options.Sinks,
	// as decoded into the value its SinkKind.New returned (nil for the
	// built-in kinds).
	Settings any `yaml:"-"`
}

// Reconcile schedules a value-level reconcile from the daemon, and the key
// check (reconcile.Keys) on a schedule of its own; Repair applies to both.
type Reconcile struct {
	Schedule     string `yaml:"schedule"`
	Repair       bool   `yaml:"repair"`
	KeysSchedule string `yaml:"keys_schedule"`
}

// Duration is a time.Duration written as "5s", "250ms" or "1h".
type Duration struct{ time.Duration }

// Errorf returns a config error that names the file, the line of key and the key.
func (c *Config) Errorf(key, format string, args ...any) error {
	return &FieldError{File: c.File, Line: c.Lines[key], Key: key, Msg: fmt.Sprintf(format, args...)}
}

// ErrorAt returns err as a config error at key: its text follows the
// file, the line and the key, and errors.As still finds err.
func (c *Config) ErrorAt(key string, err error) error {
	return &FieldError{File: c.File, Line: c.Lines[key], Key: key, Msg: err.Error(), Err: err}
}

// KeyErrorf is Errorf for sink.key. The key defaults to the last cursor
// column, so when the file does not set sink.key the error points at the
// line of source.cursor.
func (c *Config) KeyErrorf(format string, args ...any) error {
	line, ok := c.Lines["sink.key"]
	if !ok {
		line = c.Lines["source.cursor"]
	}
	return &FieldError{File: c.File, Line: line, Key: "sink.key", Msg: fmt.Sprintf(format, args...)}
}

// FieldError is a config error at one key of one file.
type FieldError struct {
	File string
	Line int
	Key  string
	Msg  string
	// Err, when set, is the typed error Msg was made from.
	Err error
}

func (e *FieldError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Key == "" {
		return fmt.Sprintf("%s: %s", loc, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Key, e.Msg)
}

// Unwrap makes every FieldError an ErrInvalid, and lets errors.As find Err.
func (e *FieldError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}
