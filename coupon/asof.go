package coupon

import (
	"fmt"
	"strings"
)

// AsOfToken is the placeholder in source.where bound to the campaign's
// frozen start time.
const AsOfToken = ":as_of"

// BindAsOf replaces every :as_of token of a where clause by the bound
// parameter $n (cast to timestamptz) and reports whether one was found. The
// time itself never enters the SQL text.
//
// The rule: a token is ":as_of" not preceded by another ':' (so a cast such
// as x::as_of is left alone) and not followed by a letter, digit, '_' or '$'.
// Tokens inside 'string literals' (also E'...'), "quoted identifiers",
// $tag$dollar quotes$tag$, -- line comments and /* block comments */ are
// left as written.
func BindAsOf(where string, n int) (string, bool) {
	var b strings.Builder
	param := fmt.Sprintf("$%d::timestamptz", n)
	found := false
	s := where
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\'' || c == '"':
			j := skipQuoted(s, i, c)
			b.WriteString(s[i:j])
			i = j
		case c == '-' && strings.HasPrefix(s[i:], "--"):
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				j = len(s) - i
			}
			b.WriteString(s[i : i+j])
			i += j
		case c == '/' && strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			end := len(s)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			b.WriteString(s[i:end])
			i = end
		case c == '$' && dollarTag(s[i:]) != "":
			tag := dollarTag(s[i:])
			j := strings.Index(s[i+len(tag):], tag)
			end := len(s)
			if j >= 0 {
				end = i + len(tag) + j + len(tag)
			}
			b.WriteString(s[i:end])
			i = end
		case c == ':' && strings.HasPrefix(s[i:], AsOfToken) && (i == 0 || s[i-1] != ':') &&
			(i+len(AsOfToken) == len(s) || !identChar(s[i+len(AsOfToken)])):
			b.WriteString(param)
			found = true
			i += len(AsOfToken)
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), found
}

// skipQuoted returns the index just past the quoted text that starts at i;
// a doubled quote stays inside, and in an E'...' literal so does \'.
func skipQuoted(s string, i int, q byte) int {
	escapes := q == '\'' && i > 0 && (s[i-1] == 'E' || s[i-1] == 'e')
	for j := i + 1; j < len(s); j++ {
		switch {
		case escapes && s[j] == '\\':
			j++
		case s[j] == q && j+1 < len(s) && s[j+1] == q:
			j++
		case s[j] == q:
			return j + 1
		}
	}
	return len(s)
}

// dollarTag returns "$tag$" when s starts with a dollar-quote opener.
func dollarTag(s string) string {
	for j := 1; j < len(s); j++ {
		switch {
		case s[j] == '$':
			return s[:j+1]
		case !identChar(s[j]) || (j == 1 && s[j] >= '0' && s[j] <= '9'):
			return "" // $1 is a parameter, not a dollar quote
		}
	}
	return ""
}

func identChar(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}
