package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"
)

// keysRep is what the driver reads of `syncd reconcile [--keys] --json`.
type keysRep struct {
	Missing, Extra, Changed int64
	Keys                    struct{ Extra []string }
	HashesRead              int64 `json:"hashes_read"`
	RowsFetched             int64 `json:"rows_fetched"`
}

// keyCheck measures `syncd reconcile --keys` beside the full reconcile on
// a synced copy of items with 0.1% of the source's rows deleted, scattered
// (id % 1000 = 7): the key check must find every deleted row and cost at
// most 0.3x the full reconcile. Both are run alternately in the same
// minutes, each on the vacuumed tables (the key check reads the key
// indexes by index-only scans).
func (b *bench) keyCheck(ctx context.Context, t *table) error {
	if err := b.ensureItems(ctx); err != nil {
		return err
	}
	cfg, err := b.itemsConfig("keys", "items", "items", 1000, "")
	if err != nil {
		return err
	}
	state := b.statePath("keys")
	keys := []string{"reconcile", "--keys", "--config", cfg, "--state", state, "--source", "keys", "--json"}
	if r, err := b.syncd(ctx, keys...); notInBuild(r, err) {
		t.missing("keys", "`syncd reconcile --keys` is not in this build")
		return nil
	}
	os.Remove(state)
	if err := b.emptyCopy(ctx, "items"); err != nil {
		return err
	}
	if _, err := b.syncd(ctx, "run", "--once", "--config", cfg, "--state", state); err != nil {
		return err
	}
	if err := execAll(ctx, b.src, "CREATE TABLE items_deleted AS SELECT * FROM items WHERE id % 1000 = 7", "DELETE FROM items WHERE id % 1000 = 7", "VACUUM ANALYZE items"); err != nil {
		return err
	}
	defer execAll(context.WithoutCancel(ctx), b.src, "INSERT INTO items SELECT * FROM items_deleted", "DROP TABLE items_deleted", "VACUUM ANALYZE items") //nolint:errcheck // the next row syncs its own copy
	if err := execAll(ctx, b.dst, "VACUUM ANALYZE items"); err != nil {
		return err
	}
	var deleted int64
	if err := b.src.QueryRow(ctx, "SELECT count(*) FROM items_deleted").Scan(&deleted); err != nil {
		return err
	}
	full := append([]string{}, keys...)
	full = append(full[:1], full[2:]...) // without --keys
	run := func(args []string) (time.Duration, keysRep, error) {
		var rep keysRep
		r, err := b.syncd(ctx, args...)
		if err != nil && r.exit != 1 {
			return 0, rep, err
		}
		if err := json.Unmarshal(r.stdout, &rep); err != nil {
			return 0, rep, fmt.Errorf("%v printed %q: %w", args[:2], r.stdout, err)
		}
		if rep.Extra != deleted || rep.Missing+rep.Changed != 0 {
			return 0, rep, fmt.Errorf("%v found %d extra, %d missing, %d changed rows; want the %d deleted rows extra, nothing else", args[:2], rep.Extra, rep.Missing, rep.Changed, deleted)
		}
		for _, k := range rep.Keys.Extra {
			if id, err := strconv.ParseInt(k, 10, 64); err != nil || id%1000 != 7 {
				return 0, rep, fmt.Errorf("%v reported key %q, which was not deleted", args[:2], k)
			}
		}
		return r.wall, rep, nil
	}
	var checks, fulls []time.Duration
	var rep keysRep
	for range b.o.runs {
		d, r, err := run(keys)
		if err != nil {
			return err
		}
		checks, rep = append(checks, d), r
		if d, _, err = run(full); err != nil {
			return err
		}
		fulls = append(fulls, d)
	}
	t.add(row{
		name: "key check, 0.1% deleted, " + fmtRows(b.rows) + " rows", syncd: fmtDur(median(checks)), limit: fmtDur(median(fulls)),
		ratio: fmt.Sprintf("%.2f", median(checks).Seconds()/median(fulls).Seconds()), target: "<= 0.30, all found",
		note: fmt.Sprintf("limit: the full reconcile of the same tables (`syncd reconcile`), run alternately; found %d of %d deleted rows; keys streamed %d, whole rows fetched %d; runs key check %s, full %s",
			rep.Extra, deleted, rep.HashesRead, rep.RowsFetched, durs(checks), durs(fulls)),
	})
	return nil
}
