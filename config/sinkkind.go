package config

import (
	"maps"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// SinkKind is what a load needs to know of a kind of sink beyond the
// built-in ones (SinkPostgres, SinkCouponGrants): the keys of its own under
// sink:, decoded as strictly as the rest of the file, and their checks. A
// kind registers it through Options.Sinks, so that adding a kind needs no
// change to this package.
type SinkKind struct {
	// New returns a pointer to a struct whose yaml-tagged fields are the
	// kind's own keys under sink: (nil: none). The load decodes them into
	// it (unknown keys are still refused, ${VAR} references expanded, the
	// line of each key recorded as sink.KEY) and keeps it in
	// Sink.Settings.
	New func() any
	// NoDSN is set for a kind that connects to no database: sink.dsn and
	// sink.dsn_file are then neither needed nor taken.
	NoDSN bool
	// Docs describes each of the kind's own keys (by its name under
	// sink:, Markdown) for the generated key reference and JSON Schema
	// (configdoc.ReferenceWith, configdoc.SchemaWith).
	Docs map[string]string
	// Check checks and normalises the kind's settings once the common
	// keys are; its errors come from c.Errorf at their key, so they name
	// the file, the line and the key.
	Check func(c *Config) error
}

var sinkType = reflect.TypeOf(Sink{})

// sinkTypeOf is the value of the type key of a sink: mapping ("" when
// absent or not a plain value).
func sinkTypeOf(n *yaml.Node) string {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "type" && n.Content[i+1].Kind == yaml.ScalarNode {
			return n.Content[i+1].Value
		}
	}
	return ""
}

// ownSettings returns the settings value a registered kind decodes its
// own keys of the sink: mapping n into (invalid when it has none), after
// storing it in the Sink v.
func (d *decoder) ownSettings(n *yaml.Node, v reflect.Value) reflect.Value {
	if v.Type() != sinkType || n.Kind != yaml.MappingNode {
		return reflect.Value{}
	}
	k, ok := d.sinks[sinkTypeOf(n)]
	if !ok || k.New == nil {
		return reflect.Value{}
	}
	own := reflect.ValueOf(k.New())
	v.FieldByName("Settings").Set(own)
	return own.Elem()
}

// checkOwnSink checks a sink of a kind registered in Options.Sinks: the
// keys that only a built-in kind takes are refused, then the kind checks
// its own.
func (c *Config) checkOwnSink(k SinkKind) error {
	for key, only := range map[string]string{"sink.campaign": SinkCouponGrants, "sink.grant_page_size": SinkCouponGrants, "sink.create_extensions": SinkPostgres} {
		if _, set := c.Lines[key]; set {
			return c.Errorf(key, "only a %s sink takes it; remove it from this %s sink", only, c.Sink.Type)
		}
	}
	if strings.Contains(c.Source.Where, ":as_of") {
		return c.Errorf("source.where", ":as_of is bound only for a coupon_grants sink")
	}
	if c.Sink.KeepDeleted && c.Source.DeletedColumn == "" {
		return c.Errorf("sink.keep_deleted", "needs source.deleted_column to know which rows are deleted")
	}
	if k.Check == nil {
		return nil
	}
	return k.Check(c)
}

// sinkTypes lists the sink types a load with sinks knows: the built-in
// ones, then the registered ones, sorted ("postgres or coupon_grants").
func sinkTypes(sinks map[string]SinkKind) string {
	out := []string{SinkPostgres, SinkCouponGrants}
	for _, t := range slices.Sorted(maps.Keys(sinks)) {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return strings.Join(out[:len(out)-1], ", ") + " or " + out[len(out)-1]
}
