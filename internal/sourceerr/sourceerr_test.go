package sourceerr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/syncd/syncd/internal/sourceerr"
)

var errCause = errors.New("cause")

// An error is named by its source once: Name leaves an error that already
// names it (anywhere in its chain) as it is, and names any other.
func TestName(t *testing.T) {
	named := &sourceerr.SourceError{Source: "orders", Err: errCause}
	for _, c := range []struct {
		err  error
		want string
	}{
		{errCause, "source orders: cause"},
		{named, "source orders: cause"},
		{fmt.Errorf("%w", named), "source orders: cause"},
		{&sourceerr.SourceError{Source: "other", Err: errCause}, "source orders: source other: cause"},
	} {
		got := sourceerr.Name("orders", c.err)
		if got.Error() != c.want || !errors.Is(got, errCause) {
			t.Errorf("Name(orders, %q) = %q, want %q (wrapping the cause)", c.err, got, c.want)
		}
	}
}

// ResyncNeeded says its reason, then the resync, then the other ways out,
// and keeps its cause for errors.Is; errors.As finds it through a wrap.
func TestResyncNeeded(t *testing.T) {
	err := fmt.Errorf("run: %w", &sourceerr.ResyncNeeded{Source: "orders", Reason: "the cursor changed: ", Alt: "(or --from)", Err: errCause})
	want := "run: the cursor changed: run `syncd resync --source orders --from-start` (or --from)"
	if err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
	var rn *sourceerr.ResyncNeeded
	if !errors.As(err, &rn) || rn.Source != "orders" || !errors.Is(err, errCause) {
		t.Errorf("errors.As/Is on %q: %+v", err, rn)
	}
	if got := (&sourceerr.ResyncNeeded{Source: "a", Reason: "x; "}).Error(); got != "x; run `syncd resync --source a --from-start`" {
		t.Errorf("without Alt: %q", got)
	}
}
