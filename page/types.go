package page

// UserType is a type defined in the source database that a column uses,
// directly, as an array element, or nested in another such type. The sink
// creates it before the copy. Type names (Base, Fields) are format_type
// output, as the catalog gives them.
type UserType struct {
	Schema string
	Name   string
	// Kind is 'e' enum, 'd' domain, 'c' composite, 'r' range, 'x' a type
	// of an extension (any kind).
	Kind byte
	// Labels are an enum's labels in their sort order.
	Labels []string
	// Base is a domain's base type (with its modifier) or a range's subtype.
	Base string
	// NotNull, Default and Checks are a domain's constraints and default
	// (pg_get_constraintdef / pg_get_expr text).
	NotNull bool
	Default string
	Checks  []string
	// CheckNames are the names of a domain's Checks, in the same order.
	CheckNames []string
	// Fields are a composite type's attributes, in order.
	Fields []Field
	// Extension, for Kind 'x', is the extension the type belongs to in the
	// source (pg_depend 'e'), ExtVersion its version there and ExtSchema
	// the schema it was created in; the sink gets the type by CREATE
	// EXTENSION, never by syncd's own DDL. Columns are the source columns
	// that need it (directly, or through an array, domain or composite).
	Extension  string
	ExtVersion string
	ExtSchema  string
	Columns    []string
}

// Field is one attribute of a composite type.
type Field struct {
	Name string
	Type string
}
