package reconcile

import (
	"context"
	"testing"

	"github.com/syncd/syncd/internal/pgtest"
)

// TestKeyHashByValue evaluates keyHash in PostgreSQL: swapping the values
// of two key columns changes the hash, as do 1 and 2^32 (which hashint8extended
// unseeded hashes alike); an int4 and an int8 of the same
// value hash alike, as do a text and a varchar, so that a copy whose key
// column has a wider type agrees with its source; the line and the summed
// hash of one key differ.
func TestKeyHashByValue(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE h (name text PRIMARY KEY, a int4, b int4, c int8, d int8, s text, v varchar, u uuid)`)
	db.Exec(t, `INSERT INTO h VALUES
  ('one-two', 1, 2, 1, 2, 'x', 'x', '00000000-0000-0000-0000-000000000001'),
  ('two-one', 2, 1, 2, 1, 'x', 'x', '00000000-0000-0000-0000-000000000001'),
  ('zero', 0, 0, 0, 0, 'X', 'X', '00000000-0000-0000-0000-000000000002'),
  ('minus', -1, -1, -1, -1, 'x ', 'x ', '00000000-0000-0000-0000-000000000003'),
  ('big', 1, 1, 4294967296, 1, 'ab', 'ab', '00000000-0000-0000-0000-000000000004')`)
	cols := map[string]column{
		"a": {Name: "a", Base: "int4"}, "b": {Name: "b", Base: "int4"}, "c": {Name: "c", Base: "int8"}, "d": {Name: "d", Base: "int8"},
		"s": {Name: "s", Base: "text"}, "v": {Name: "v", Base: "varchar"}, "u": {Name: "u", Base: "uuid"},
	}
	hash := func(row string, seed int64, names ...string) int64 {
		t.Helper()
		keys := make([]column, len(names))
		for i, n := range names {
			keys[i] = cols[n]
		}
		var h int64
		if err := db.Pool.QueryRow(context.Background(), "SELECT "+keyHash("y.", keys, valueFamilies(keys, keys), seed)+" FROM h y WHERE name = $1", row).Scan(&h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	if hash("one-two", lineSeed, "a", "b") == hash("two-one", lineSeed, "a", "b") {
		t.Error("(1, 2) and (2, 1) hash alike")
	}
	if hash("one-two", lineSeed, "a", "b") != hash("one-two", lineSeed, "c", "d") {
		t.Error("int4 (1, 2) and int8 (1, 2) hash apart")
	}
	if hash("big", sumSeed, "c") == hash("one-two", sumSeed, "c") || hash("zero", sumSeed, "c") == hash("minus", sumSeed, "c") {
		t.Error("1 and 2^32, or 0 and -1, hash alike")
	}
	if hash("one-two", sumSeed, "s", "u") != hash("one-two", sumSeed, "v", "u") {
		t.Error("text and varchar 'x' hash apart")
	}
	if hash("one-two", sumSeed, "s") == hash("zero", sumSeed, "s") || hash("one-two", sumSeed, "s") == hash("minus", sumSeed, "s") {
		t.Error("'x', 'X' and 'x ' do not all hash apart")
	}
	if hash("one-two", sumSeed, "u") == hash("zero", sumSeed, "u") {
		t.Error("two uuids hash alike")
	}
	if hash("one-two", sumSeed, "u", "a") == hash("one-two", lineSeed, "u", "a") {
		t.Error("the line and the summed hash of a key are the same")
	}
	// A mixed family: a uuid key of the source held as text by the copy
	// is hashed by its canonical text on both sides.
	if f := valueFamilies([]column{cols["u"], cols["a"]}, []column{cols["s"], cols["c"]}); f[0] != "" || f[1] != "int" {
		t.Errorf("families of (uuid, int4) against (text, int8): %q, want canonical text and int", f)
	}
}
