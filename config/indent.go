package config

import (
	"strings"
)

// yamlError turns a YAML parse error of file into a config error. yaml.v3
// reports a badly indented line as "did not find expected key" (or
// "mapping values are not allowed in this context") at a line above the
// mistake, often the line that opened the mapping; for those errors the
// file's indentation is read again to point at the line that breaks it.
func yamlError(file string, data []byte, err error) error {
	line, text := yamlErrLine(err), yamlErrText(err)
	if !indentationError(text) {
		return &FieldError{File: file, Line: line, Msg: "malformed YAML: " + text}
	}
	if at, why := indentMistake(data, line-1); at > 0 {
		return &FieldError{File: file, Line: at, Msg: "check the indentation: " + why + " (yaml: " + text + ")"}
	}
	switch {
	case strings.Contains(text, "did not find expected key"):
		text += "; check the indentation of this line and the lines below it"
	case strings.Contains(text, "mapping values are not allowed"):
		text += `; a value with ": " in it needs quotes`
	}
	return &FieldError{File: file, Line: line, Msg: "malformed YAML: " + text}
}

// indentationError reports whether a yaml.v3 message is one that a badly
// indented line causes.
func indentationError(text string) bool {
	for _, m := range []string{
		"did not find expected key",
		"mapping values are not allowed in this context",
		"found a tab character",
		"found character that cannot start any token",
		"did not find expected '-' indicator",
		"block sequence entries are not allowed in this context",
	} {
		if strings.Contains(text, m) {
			return true
		}
	}
	return false
}

// indentMistake finds the first line, from line from on (1-based), whose
// indentation breaks the block structure above it: a tab in the
// indentation, a line indented more than a line that has its value
// already, or a line indented to none of the levels of the keys and list
// items above it. It returns 0 when every line is consistent. Flow
// collections ([...], {...}) and block scalars (| and >) spanning lines are
// skipped; a plain scalar continued on a more indented line is taken as a
// mistake (legal YAML, but in a source file a misplaced key).
func indentMistake(data []byte, from int) (int, string) {
	var levels []int // indentation of the open block collections, innermost last
	openAt := -1     // >= 0: the line above opened a block under a key or item at this indentation
	openKey := false // the opener was a key (its list items may share its indentation)
	scalarAt := -1   // >= 0: inside a block scalar of a key at this indentation
	flow := 0        // depth of a flow collection spanning lines
	for i, raw := range strings.Split(string(data), "\n") {
		n := i + 1
		line := strings.TrimRight(raw, " \t\r")
		ind := len(line) - len(strings.TrimLeft(line, " "))
		content := line[ind:]
		if scalarAt >= 0 {
			if content == "" || ind > scalarAt {
				continue
			}
			scalarAt = -1
		}
		if flow > 0 {
			flow += flowDepth(content)
			continue
		}
		if content == "" || content[0] == '#' {
			continue
		}
		if content[0] == '\t' {
			if n >= from {
				return n, "this line is indented with a tab; YAML indents with spaces only"
			}
			continue
		}
		if ind == 0 && (content == "---" || strings.HasPrefix(content, "--- ") || content == "...") {
			levels, openAt = nil, -1
			continue
		}
		item := content == "-" || strings.HasPrefix(content, "- ")
		switch {
		case openAt >= 0 && (ind > openAt || ind == openAt && openKey && item):
			levels = append(levels, ind) // the block the line above opened
		case len(levels) == 0:
			levels = append(levels, ind)
		case ind > levels[len(levels)-1]:
			if n >= from {
				return n, "this line is indented more than the line above it, which has its value already"
			}
			continue
		default:
			k := len(levels)
			for k > 0 && levels[k-1] > ind {
				k--
			}
			if k == 0 || levels[k-1] != ind {
				if n >= from {
					return n, "this line is indented differently from the keys above it"
				}
				continue
			}
			levels = levels[:k]
		}
		openAt, openKey = -1, false
		at := ind
		if item {
			// A list item: what follows "- " is a node indented to its
			// column.
			rest := strings.TrimLeft(content[1:], " ")
			at = ind + len(content) - len(rest)
			if rest == "" || rest[0] == '#' {
				openAt = ind
				continue
			}
			levels = append(levels, at)
			content = rest
		}
		isKey, value := splitKey(content)
		switch {
		case !isKey:
			flow = flowDepth(content)
		case value == "":
			openAt, openKey = at, true
		case value[0] == '|' || value[0] == '>':
			scalarAt = at
		default:
			flow = flowDepth(value)
		}
	}
	return 0, ""
}

// splitKey reports whether a line's content is a mapping key ("key:" or
// "key: value") and returns its value without a trailing comment.
func splitKey(s string) (bool, string) {
	if s == "" || strings.ContainsRune("[{\"'", rune(s[0])) && !quotedKey(s) {
		return false, ""
	}
	quote := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '"' && c == '\\':
			i++
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case i == 0 && (c == '"' || c == '\''):
			quote = c
		case c == '#' && i > 0 && s[i-1] == ' ':
			return false, ""
		case c == ':' && (i+1 == len(s) || s[i+1] == ' '):
			v := strings.TrimSpace(s[i+1:])
			if strings.HasPrefix(v, "#") {
				v = ""
			}
			return true, v
		}
	}
	return false, ""
}

// quotedKey reports whether s starts with a quoted string followed by ":".
func quotedKey(s string) bool {
	q := s[0]
	if q != '"' && q != '\'' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if q == '"' && s[i] == '\\' {
			i++
			continue
		}
		if s[i] == q {
			return strings.HasPrefix(strings.TrimLeft(s[i+1:], " "), ":")
		}
	}
	return false
}

// flowDepth is how many flow collections a line opens and leaves open
// (negative: closes), quotes aside.
func flowDepth(s string) int {
	d := 0
	quote := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '"' && c == '\\':
			i++
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#' && (i == 0 || s[i-1] == ' '):
			return d
		case c == '[' || c == '{':
			d++
		case c == ']' || c == '}':
			d--
		}
	}
	return d
}
