package ops_test

import (
	"testing"
	"time"

	"github.com/syncd/syncd/ops"
	"github.com/syncd/syncd/watermark"
)

// A resync point is a move forward only when it lies after the
// watermark's first cursor value (or an earlier resync point): never
// without a watermark, never for a cursor that is not a time, and for a
// date cursor only from the next day on (a run reads from the day the
// point falls in).
func TestPlanMoveForward(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name    string
		st      watermark.State
		to      time.Time
		forward bool
	}{
		{"no watermark", watermark.State{}, at("2026-10-01T10:00:00Z"), false},
		{"from start", watermark.State{Cursor: []string{"2026-10-01 09:00:00+00", "1"}}, time.Time{}, false},
		{"back", watermark.State{Cursor: []string{"2026-10-01 09:00:00.5+00", "1"}}, at("2026-10-01T09:00:00.4Z"), false},
		{"at the watermark", watermark.State{Cursor: []string{"2026-10-01 09:00:00.5+00", "1"}}, at("2026-10-01T09:00:00.5Z"), false},
		{"after the watermark", watermark.State{Cursor: []string{"2026-10-01 09:00:00.5+00", "1"}}, at("2026-10-01T09:00:00.500001Z"), true},
		{"timestamp without time zone", watermark.State{Cursor: []string{"2026-10-01 09:00:00", "1"}}, at("2026-10-01T09:00:01Z"), true},
		{"after an earlier resync point", watermark.State{From: "2026-10-01T09:00:00Z"}, at("2026-10-01T09:30:00Z"), true},
		{"before an earlier resync point", watermark.State{From: "2026-10-01T09:00:00Z"}, at("2026-10-01T08:30:00Z"), false},
		{"sequence cursor", watermark.State{Cursor: []string{"100"}}, at("2026-10-01T09:00:00Z"), false},
		{"date, same day", watermark.State{Cursor: []string{"2026-10-01", "1"}}, at("2026-10-01T23:00:00Z"), false},
		{"date, next day", watermark.State{Cursor: []string{"2026-10-01", "1"}}, at("2026-10-02T00:00:00Z"), true},
	} {
		if got := ops.PlanMove(tc.st, tc.to).Forward(); got != tc.forward {
			t.Errorf("%s: forward %v, want %v", tc.name, got, tc.forward)
		}
	}
}
