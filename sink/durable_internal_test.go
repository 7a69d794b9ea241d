package sink

import "testing"

func TestDurabilityFollowsFlushPosition(t *testing.T) {
	var d durability
	step := func(async bool, ins, flush string, want int64) {
		t.Helper()
		if err := d.committed(async, ins, flush); err != nil {
			t.Fatal(err)
		}
		if d.durable != want {
			t.Fatalf("after page %d: durable %d, want %d", d.applied, d.durable, want)
		}
	}
	step(true, "0/1000", "0/0FFF", 0) // not flushed yet
	step(true, "0/2000", "0/1000", 1) // the first is now
	step(true, "1/00000010", "0/FFFFFFFF", 2)
	step(true, "1/00000020", "1/00000010", 3)
	step(false, "", "", 5) // a synchronous commit flushes every earlier one
	if len(d.pending) != 0 {
		t.Fatalf("pending %v after a synchronous commit", d.pending)
	}
	if _, err := parseLSN("zz"); err == nil {
		t.Fatal("parseLSN accepted garbage")
	}
}
