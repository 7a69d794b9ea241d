package reconcile

import "fmt"

// Seeds of the two key hashes of the key check (keyHash): one places a key
// on the line, the other is summed. Independent seeds make the sum of a
// range a hash unrelated to where its keys lie in it: summed, the place
// itself would be confined to the range's width (2^48 at the first level
// of 1M keys), and equal sums of differing keys far likelier than 2^-64.
const (
	lineSeed int64 = 0
	sumSeed  int64 = 0x5bd1e9955bd1e995
)

// hashFamily is how a key column's values are hashed by their value
// (keyHash): "int" (int2, int4, int8: by the int8 value), "text" (text,
// varchar: by the bytes of the text), "uuid" (by its 16 bytes); "" for
// any other type, hashed by its canonical text.
func hashFamily(c column) string {
	if c.Loose || c.Elem != "" {
		return ""
	}
	switch c.Base {
	case "int2", "int4", "int8":
		return "int"
	case "text", "varchar":
		return "text"
	case "uuid":
		return "uuid"
	}
	return ""
}

// valueFamilies are the families by which each key column is hashed on
// both sides: a column's family when both sides' types share it (int4 at
// the source, int8 in the copy), else "" (its canonical text). Both sides
// then hash an equal key alike.
func valueFamilies(src, dst []column) []string {
	out := make([]string, len(src))
	for i := range src {
		if f := hashFamily(src[i]); f == hashFamily(dst[i]) {
			out[i] = f
		}
	}
	return out
}

// keyHash is the SQL of a 64-bit hash of the key columns keys of alias
// prefix ("y."), computed from their values, with PostgreSQL's own
// hashes, instead of hashing the canonical text of the whole key: no text
// is built for a uuid or an integer, and a text is hashed as it is. The
// columns are chained: each column's hash is seeded with the hash of the
// columns before it (the first with seed), so the hash depends on the
// order of the values, and (1, 2) and (2, 1) hash apart.
//
//   - int2, int4, int8: hashint8extended(v, v # seed): unseeded it hashes
//     only the low 32 bits of v xor its high 32 bits (1 and 2^32 alike);
//     the value in the seed mixes all 64 bits in (as the integer key's
//     hashint8extended(k, k) does).
//   - uuid: uuid_hash_extended(v, seed), its 16 bytes.
//   - text, varchar: hashtextextended(v COLLATE "C", seed): the bytes of
//     the text, whatever the column's collation. Under a nondeterministic
//     collation hashtextextended would hash a sort key instead (one ICU
//     version's), which two servers need not share; bytes are what the
//     canonical text hashes too, and two keys of equal bytes are equal
//     under every collation. Keys that a collation calls equal but whose
//     bytes differ are told apart here, as by the canonical text, and the
//     re-read by key (recheckKeys), under the tables' own collations,
//     judges them.
//   - any other type (family ""): hashtextextended of its canonical text.
//
// The servers must agree on PostgreSQL's hashes (pickHash's probe, which
// hashes multi-byte text, so the server encodings agree too). Every key
// column is NOT NULL in the rows compared (the scope leaves NULL keys
// out), so no hash is NULL.
func keyHash(prefix string, keys []column, families []string, seed int64) string {
	h := fmt.Sprintf("(%d)::int8", seed)
	for i, c := range keys {
		v := prefix + ident(c.Name)
		switch families[i] {
		case "int":
			v = "(" + v + ")::int8"
			h = "hashint8extended(" + v + ", " + v + " # " + h + ")"
		case "uuid":
			h = "uuid_hash_extended((" + v + ")::uuid, " + h + ")"
		case "text":
			h = "hashtextextended((" + v + ")::text COLLATE \"C\", " + h + ")"
		default:
			h = "hashtextextended((" + canonOf(prefix, c) + ") COLLATE \"C\", " + h + ")"
		}
	}
	return h
}
