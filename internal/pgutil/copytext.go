package pgutil

import "bytes"

// AppendCopyText appends rows in COPY's text format: tab-separated, \N for
// NULL, backslash escapes for backslash, tab, newline and carriage return.
func AppendCopyText(buf *bytes.Buffer, rows [][][]byte) {
	for _, row := range rows {
		for i, v := range row {
			if i > 0 {
				buf.WriteByte('\t')
			}
			if v == nil {
				buf.WriteString(`\N`)
				continue
			}
			start := 0
			for j, c := range v {
				var esc string
				switch c {
				case '\\':
					esc = `\\`
				case '\t':
					esc = `\t`
				case '\n':
					esc = `\n`
				case '\r':
					esc = `\r`
				default:
					continue
				}
				buf.Write(v[start:j])
				buf.WriteString(esc)
				start = j + 1
			}
			buf.Write(v[start:])
		}
		buf.WriteByte('\n')
	}
}
