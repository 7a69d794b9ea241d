// Package configdoc documents the keys of a source file: it walks the config
// structs' yaml tags (the keys the strict decoder accepts), joins each with
// its description in keys.go, and renders the key reference of
// docs/CONFIG.md and the JSON Schema docs/syncd.schema.json (make docs).
// Its tests fail when a key has no description or a file is out of date.
package configdoc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/syncd/syncd/config"
)

// Key is one key the decoder accepts.
type Key struct {
	// Path is the dotted key, as errors name it: source.first_load.workers.
	Path string
	// Kind is string, integer, boolean, duration, size, list, mapping or
	// names (a mapping from names the user chooses, such as tables' names,
	// to mappings of the Children's keys; their paths say NAME there).
	Kind string
	// Children are a mapping's keys, or the keys of each value of names.
	Children []Key
}

// NamePart stands for the name in the path of a key under a names key:
// tables.TABLE.cursor.
const NamePart = "TABLE"

var (
	durationType = reflect.TypeOf(config.Duration{})
	sizeType     = reflect.TypeOf(config.Size{})
)

// Keys walks config.Config as the decoder does: every field with a yaml tag
// other than "-", pointers followed, structs other than Duration and Size
// being mappings of their own keys.
func Keys() []Key { return walk(reflect.TypeOf(config.Config{}), "") }

// ref is the reference of the built-in keys and those of the sink kinds
// registered besides them (config.SinkKind), with their descriptions.
type ref struct {
	keys  []Key
	docs  map[string]doc
	noDSN []string // the registered types that take no sink.dsn
}

// refOf builds the reference with the keys of sinks under sink:, each
// described as its kind's Docs say.
func refOf(sinks map[string]config.SinkKind) ref {
	r := ref{keys: Keys(), docs: docs}
	if len(sinks) == 0 {
		return r
	}
	r.docs = maps.Clone(docs)
	typ := r.docs["sink.type"]
	typ.Enum = slices.Clone(typ.Enum)
	for _, t := range slices.Sorted(maps.Keys(sinks)) {
		k := sinks[t]
		typ.Enum = append(typ.Enum, t)
		if k.NoDSN {
			r.noDSN = append(r.noDSN, t)
		}
		if k.New == nil {
			continue
		}
		i := slices.IndexFunc(r.keys, func(k Key) bool { return k.Path == "sink" })
		for _, own := range walk(reflect.TypeOf(k.New()).Elem(), "sink") {
			r.keys[i].Children = append(r.keys[i].Children, own)
			name := strings.TrimPrefix(own.Path, "sink.")
			r.docs[own.Path] = doc{Text: "`" + t + "` only: " + k.Docs[name]}
		}
	}
	r.docs["sink.type"] = typ
	return r
}

func walk(t reflect.Type, prefix string) []Key {
	var out []Key
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		if tag == "" || tag == "-" {
			continue
		}
		k := Key{Path: strings.TrimPrefix(prefix+"."+tag, ".")}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft == durationType:
			k.Kind = "duration"
		case ft == sizeType:
			k.Kind = "size"
		case ft.Kind() == reflect.Struct:
			k.Kind = "mapping"
			k.Children = walk(ft, k.Path)
		case ft.Kind() == reflect.Map && ft.Key().Kind() == reflect.String && ft.Elem().Kind() == reflect.Struct:
			k.Kind = "names"
			k.Children = walk(ft.Elem(), k.Path+"."+NamePart)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.String:
			k.Kind = "list"
		case ft.Kind() == reflect.String:
			k.Kind = "string"
		case ft.Kind() == reflect.Int:
			k.Kind = "integer"
		case ft.Kind() == reflect.Bool:
			k.Kind = "boolean"
		default:
			panic(fmt.Sprintf("configdoc: key %s has type %s, which this package cannot describe", k.Path, ft))
		}
		out = append(out, k)
	}
	return out
}

// flatten lists keys depth first, each mapping before its children.
func flatten(keys []Key) []Key {
	var out []Key
	for _, k := range keys {
		out = append(out, k)
		out = append(out, flatten(k.Children)...)
	}
	return out
}

// kindText is a key's type as CONFIG.md writes it.
func kindText(kind string) string {
	switch kind {
	case "list":
		return "list of strings"
	case "duration":
		return "duration (`5s`, `250ms`, `1h`)"
	case "size":
		return "size (`16MB`, `512kB`, `8192`)"
	case "names":
		return "mapping of table names to mappings"
	}
	return kind
}

// Reference returns the generated part of docs/CONFIG.md: a table of every
// key, then a section per key.
func Reference() string { return refOf(nil).reference() }

// ReferenceWith is Reference with the keys of the sink kinds a build
// registers besides the built-in ones (kind.Registry.Sinks).
func ReferenceWith(sinks map[string]config.SinkKind) string { return refOf(sinks).reference() }

func (r ref) reference() string {
	keys := flatten(r.keys)
	var b strings.Builder
	b.WriteString("| key | type | default |\n|---|---|---|\n")
	for _, k := range keys {
		d := r.docs[k.Path]
		def := defaultText(d)
		if d.Required != "" {
			def = "required: " + d.Required
		}
		kind := k.Kind
		switch kind {
		case "list":
			kind = "list of strings"
		case "names":
			kind = "mapping of names"
		}
		fmt.Fprintf(&b, "| [`%s`](#%s) | %s | %s |\n", k.Path, anchor(k.Path), kind, def)
	}
	for _, k := range keys {
		d := r.docs[k.Path]
		fmt.Fprintf(&b, "\n### `%s`\n\n", k.Path)
		facts := []string{kindText(k.Kind)}
		if d.Required != "" {
			facts = append(facts, "required: "+d.Required)
		}
		if def := defaultText(d); def != "" {
			facts = append(facts, "default: "+def)
		}
		if len(d.Enum) > 0 {
			facts = append(facts, "one of `"+strings.Join(d.Enum, "`, `")+"`")
		}
		if d.Min != nil && d.Max != nil {
			facts = append(facts, fmt.Sprintf("%d to %d", *d.Min, *d.Max))
		}
		b.WriteString(strings.Join(facts, "; ") + ".\n\n" + d.Text + "\n")
		if d.Example != "" {
			b.WriteString("\n```yaml\n" + nested(k.Path, d.Example) + "```\n")
		}
	}
	return b.String()
}

func defaultText(d doc) string {
	if d.DefaultText != "" {
		return d.DefaultText
	}
	if d.Default != "" {
		return "`" + d.Default + "`"
	}
	return ""
}

// anchor is GitHub's anchor of the heading "`path`".
func anchor(path string) string {
	return strings.ToLower(strings.ReplaceAll(path, ".", ""))
}

// nested writes key path set to value as YAML, one level per dot.
func nested(path, value string) string {
	var b strings.Builder
	parts := strings.Split(path, ".")
	for i, p := range parts {
		b.WriteString(strings.Repeat("  ", i) + p + ":")
		if i == len(parts)-1 {
			b.WriteString(" " + value)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Patterns of the string forms the decoder takes.
const (
	durationPattern = `^(0|([0-9]*\.?[0-9]+(ns|us|µs|ms|s|m|h))+)$`
	sizePattern     = `^\s*[0-9]+\s*(B|kB|MB|GB)?\s*$`
	namePattern     = `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`
)

// extra holds the schema keywords of a key beyond its type, enum and
// bounds; rules those of a mapping.
var (
	extra = map[string]map[string]any{
		"name":          {"pattern": namePattern},
		"sink.campaign": {"pattern": namePattern},
		"source.cursor": {"minItems": 1},
	}
	dsnRule = []any{
		map[string]any{"required": []string{"dsn"}},
		map[string]any{"required": []string{"dsn_file"}},
	}
	rules = map[string]map[string]any{
		"reconcile": {"required": []string{"schedule"}},
		"source":    {"oneOf": dsnRule},
		"sink": {
			"oneOf": dsnRule,
			"if": map[string]any{
				"properties": map[string]any{"type": map[string]any{"const": config.SinkCouponGrants}},
				"required":   []string{"type"},
			},
			"then": map[string]any{"required": []string{"campaign"}},
		},
	}
)

// Schema returns the JSON Schema (draft-07) of a source file, one YAML
// document; editors that run yaml-language-server complete and check a
// file that names it in a `# yaml-language-server: $schema=...` line.
func Schema() []byte { return refOf(nil).schema() }

// SchemaWith is Schema with the keys of the sink kinds a build registers
// besides the built-in ones (kind.Registry.Sinks).
func SchemaWith(sinks map[string]config.SinkKind) []byte { return refOf(sinks).schema() }

func (r ref) schema() []byte {
	s := r.mapping("", r.keys)
	s["$schema"] = "http://json-schema.org/draft-07/schema#"
	s["title"] = "syncd source file"
	s["description"] = "One syncd source (a YAML document of a source file). Generated by make docs from the config structs; every key is described in docs/CONFIG.md."
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		panic(err) // only maps, slices, strings and numbers
	}
	return b.Bytes()
}

func (r ref) mapping(path string, keys []Key) map[string]any {
	props := map[string]any{}
	var required []string
	for _, k := range keys {
		props[k.Path[strings.LastIndex(k.Path, ".")+1:]] = r.property(k)
		if r.docs[k.Path].Required == "yes" {
			required = append(required, k.Path[strings.LastIndex(k.Path, ".")+1:])
		}
	}
	s := map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	for k, v := range rules[path] {
		s[k] = v
	}
	if path == "sink" && len(r.noDSN) > 0 {
		// A kind that connects to no database takes no DSN.
		delete(s, "oneOf")
		s["allOf"] = []any{map[string]any{
			"if":   map[string]any{"properties": map[string]any{"type": map[string]any{"enum": r.noDSN}}, "required": []string{"type"}},
			"then": map[string]any{"not": map[string]any{"anyOf": dsnRule}},
			"else": map[string]any{"oneOf": dsnRule},
		}}
	}
	return s
}

func (r ref) property(k Key) map[string]any {
	d := r.docs[k.Path]
	var s map[string]any
	switch k.Kind {
	case "mapping":
		s = r.mapping(k.Path, k.Children)
	case "names":
		s = map[string]any{"type": "object", "additionalProperties": r.mapping(k.Path+"."+NamePart, k.Children)}
	case "list":
		s = map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
	case "duration":
		// 0 is the one number a duration takes.
		s = map[string]any{"type": []string{"string", "integer"}, "pattern": durationPattern, "minimum": 0, "maximum": 0}
	case "size":
		s = map[string]any{"type": []string{"string", "integer"}, "pattern": sizePattern, "minimum": 0}
	default:
		s = map[string]any{"type": k.Kind}
	}
	desc := d.Text
	if def := defaultText(d); def != "" {
		desc += "\n\nDefault: " + def + "."
	}
	s["description"] = desc
	if d.Default != "" {
		s["default"] = typed(k.Kind, d.Default)
	}
	if len(d.Enum) > 0 {
		s["enum"] = d.Enum
	}
	if d.Min != nil {
		s["minimum"] = *d.Min
	}
	if d.Max != nil {
		s["maximum"] = *d.Max
	}
	if d.Example != "" {
		var v any
		if err := yaml.Unmarshal([]byte(d.Example), &v); err != nil {
			panic(fmt.Sprintf("configdoc: example of %s: %v", k.Path, err))
		}
		s["examples"] = []any{v}
	}
	for key, v := range extra[k.Path] {
		s[key] = v
	}
	return s
}

// typed is a default as the schema's JSON value of the key's kind.
func typed(kind, v string) any {
	switch kind {
	case "integer":
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	case "boolean":
		if b, err := strconv.ParseBool(v); err == nil {
			return b
		}
	}
	return v
}
