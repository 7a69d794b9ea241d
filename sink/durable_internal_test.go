package sink

import "testing"

func TestDurabilityFollowsFlushPosition(t *testing.T) {
	var d durability
	step := func(ins, flush string, want int64) {
		t.Helper()
		if err := d.committed(ins, flush); err != nil {
			t.Fatal(err)
		}
		if d.durable != want {
			t.Fatalf("after page %d: durable %d, want %d", d.applied, d.durable, want)
		}
	}
	step("0/1000", "0/0FFF", 0) // not flushed yet
	step("0/2000", "0/1000", 1) // the first is now
	step("1/00000010", "0/FFFFFFFF", 2)
	// A durable commit that wrote no WAL (an upsert that changed nothing)
	// flushed nothing: the pages before it are not durable because of it.
	step("1/00000010", "1/00000000", 2)
	step("1/00000020", "1/00000020", 5) // a commit that flushed its own record
	step("", "", 6)                     // positions unknown: a synchronous commit flushes every earlier one
	if len(d.pending) != 0 {
		t.Fatalf("pending %v after a synchronous commit", d.pending)
	}
	if _, err := parseLSN("zz"); err == nil {
		t.Fatal("parseLSN accepted garbage")
	}
}
