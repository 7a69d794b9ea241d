package cli

import (
	"strings"
	"testing"

	"github.com/syncd/syncd/config"
)

// TestNoKeyCheck: the key check is a postgres table copy's; a coupon
// campaign and a source in compare mode are refused with the reason.
func TestNoKeyCheck(t *testing.T) {
	for _, tc := range []struct {
		cfg  config.Config
		want string
	}{
		{config.Config{Name: "c", Sink: config.Sink{Type: config.SinkCouponGrants}}, "sink.type coupon_grants has no key check"},
		{config.Config{Name: "m", Mode: config.ModeCompare, Sink: config.Sink{Type: config.SinkPostgres}}, "mode compare"},
		{config.Config{Name: "p", Mode: config.ModeCursor, Sink: config.Sink{Type: config.SinkPostgres}}, ""},
	} {
		got := noKeyCheck(&tc.cfg)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: noKeyCheck = %q, want %q", tc.cfg.Name, got, tc.want)
		}
	}
}
