package pgutil_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/syncd/syncd/internal/pgutil"
)

// benchRows is a 1,000-row page of the benchmark's shape, as text.
func benchRows() [][][]byte {
	rows := make([][][]byte, 1000)
	for i := range rows {
		rows[i] = [][]byte{
			fmt.Appendf(nil, "%d", i),
			[]byte("2026-01-01 00:00:00.000097+00"),
			fmt.Appendf(nil, "customer %032x of region %d", i*7919, i%97),
			fmt.Appendf(nil, "%d.%02d", i*7, i%100),
			[]byte(`{tag1,segment-3,"a b\\c"}`),
			fmt.Appendf(nil, `{"plan": "pro", "note": "%032x", "score": %d}`, i, i%1000),
		}
	}
	return rows
}

// BenchmarkAppendCopyText encodes a 1,000-row page in COPY's text format.
func BenchmarkAppendCopyText(b *testing.B) {
	rows := benchRows()
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		pgutil.AppendCopyText(&buf, rows)
	}
	b.SetBytes(int64(buf.Len()))
}
