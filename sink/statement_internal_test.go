package sink

import "testing"

// An error names the whole DDL statement on one line, not its first words.
func TestStatementIsWholeOnOneLine(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"CREATE TABLE IF NOT EXISTS \"public\".\"t\" (\n  \"id\" bigint NOT NULL,\n  \"v\" citext,\n  PRIMARY KEY (\"id\")\n)",
			`CREATE TABLE IF NOT EXISTS "public"."t" ("id" bigint NOT NULL, "v" citext, PRIMARY KEY ("id"))`},
		{`CREATE TYPE "public"."mood" AS ENUM ('a  b', 'c')`, `CREATE TYPE "public"."mood" AS ENUM ('a  b', 'c')`},
		{"ALTER TABLE x\n\tADD COLUMN y int", "ALTER TABLE x ADD COLUMN y int"},
	} {
		if got := statement(c.in); got != c.want {
			t.Errorf("statement(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
