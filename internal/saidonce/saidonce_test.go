package saidonce

import "testing"

func TestSaidOnceThenCounted(t *testing.T) {
	var s Set
	before := Repeats()
	if !s.First("a") || s.First("a") || s.First("a") || !s.First("b") {
		t.Fatal("a key must be first once, then not")
	}
	if got := Repeats() - before; got != 2 {
		t.Fatalf("%d repeats counted, want 2", got)
	}
	s.Forget("a")
	if !s.First("a") {
		t.Fatal("a forgotten key is said again")
	}
	if !s.Changed("c", "3") || s.Changed("c", "3") || !s.Changed("c", "2") || s.Changed("c", "2") {
		t.Fatal("a key is said again when its value changes, not otherwise")
	}
}
