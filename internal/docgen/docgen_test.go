package docgen

import "testing"

func TestSplice(t *testing.T) {
	doc := "# T\n\nprose\n" + Begin + "old\n" + End + "after\n"
	got, err := Splice([]byte(doc), []byte("new\nlines\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "# T\n\nprose\n" + Begin + "new\nlines\n" + End + "after\n"; string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	for _, bad := range []string{"no markers\n", End + Begin, Begin + "no end\n"} {
		if _, err := Splice([]byte(bad), nil); err == nil {
			t.Errorf("Splice(%q) found a generated part", bad)
		}
	}
}
