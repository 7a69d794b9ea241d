package syncer_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/syncer"
)

// A label renamed in the source's enum (ALTER TYPE ... RENAME VALUE) is
// renamed in the sink's enum under evolve, so the 100 rows of the copy
// that hold it show the new name as the source does; a label added at the
// same time elsewhere is added. Under fail the run stops with the RENAME
// VALUE statement, and goes on once it ran.
func TestEnumLabelRenamed(t *testing.T) {
	for _, policy := range []string{config.SchemaEvolve, config.SchemaFail} {
		t.Run(policy, func(t *testing.T) {
			e := newEnv(t)
			e.src.Exec(t, `CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE src (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, m mood NOT NULL, ms mood[]);
INSERT INTO src SELECT i, now() - interval '1 hour' + i * interval '1 ms', (ARRAY['sad','ok','happy'])[1 + i % 3]::mood, ARRAY['ok']::mood[] FROM generate_series(1, 300) i`)
			c := e.config(t, "public.src", 100, "")
			c.SchemaChanges = policy
			e.run(t, c, syncer.Options{})
			e.src.Exec(t, `ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'`)
			e.src.Exec(t, `ALTER TYPE mood ADD VALUE 'glad' AFTER 'happy'`)
			e.src.Exec(t, `INSERT INTO src VALUES (301, now(), 'glad', '{fine,glad}')`)
			if policy == config.SchemaFail {
				_, err := syncer.Run(t.Context(), syncer.Options{Config: c, Store: e.store})
				fix := regexp.MustCompile("run `([^`]*)` on the sink").FindStringSubmatch(errString(err))
				if !errors.Is(err, syncer.ErrSchemaChange) || fix == nil || !strings.Contains(fix[1], `ALTER TYPE "public"."mood" RENAME VALUE 'ok' TO 'fine'`) {
					t.Fatalf("run under fail: %v", err)
				}
				e.dst.Exec(t, fix[1])
			}
			e.run(t, c, syncer.Options{})
			e.sameRows(t, "id, m::text, ms::text", 301)
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
