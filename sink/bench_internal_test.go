package sink

import (
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkAppendCopyBinary encodes a 1,000-row page of binary values in
// COPY's binary format.
func BenchmarkAppendCopyBinary(b *testing.B) {
	rows := make([][][]byte, 1000)
	for i := range rows {
		rows[i] = [][]byte{
			make([]byte, 8), make([]byte, 8),
			fmt.Appendf(nil, "customer %032x of region %d", i*7919, i%97),
			make([]byte, 12), make([]byte, 60),
			fmt.Appendf(nil, "\x01{\"plan\": \"pro\", \"note\": \"%032x\", \"score\": %d}", i, i%1000),
		}
	}
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		appendCopyBinary(&buf, rows)
	}
	b.SetBytes(int64(buf.Len()))
}
