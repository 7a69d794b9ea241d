package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/syncd/syncd/metrics"
)

// The skipped tables of a pattern source are one series each, replaced by
// each match and removed with the pattern; the cursor index gauge follows
// the last run.
func TestPatternSkippedAndCursorIndex(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "test")
	m.PatternSkipped("shop", map[string]string{"public.events": "no_cursor_column", "public.nokey": "no_primary_key"})
	m.PatternSkipped("other", map[string]string{"public.x": "other"})
	m.PatternSkipped("shop", map[string]string{"public.events": "no_cursor_column"})
	got := values(t, reg, "syncd_pattern_table_skipped", "source", "table", "reason")
	if len(got) != 2 || got["shop/public.events/no_cursor_column"] != 1 || got["other/public.x/other"] != 1 {
		t.Errorf("syncd_pattern_table_skipped = %v, want shop's events and other's x", got)
	}
	m.RemovePattern("shop")
	if got := values(t, reg, "syncd_pattern_table_skipped", "source", "table", "reason"); len(got) != 1 {
		t.Errorf("after RemovePattern(shop): %v", got)
	}
	m.CursorIndexMissing("orders", true)
	if v := values(t, reg, "syncd_cursor_index_missing", "source")["orders"]; v != 1 {
		t.Errorf("syncd_cursor_index_missing = %v, want 1", v)
	}
	m.CursorIndexMissing("orders", false)
	if v := values(t, reg, "syncd_cursor_index_missing", "source")["orders"]; v != 0 {
		t.Errorf("syncd_cursor_index_missing = %v, want 0", v)
	}
}
