package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Options change how a config is loaded.
type Options struct {
	// NoSecrets loads without the connection strings: source.dsn and
	// sink.dsn are neither expanded nor required, and dsn_file is not read.
	// Commands that need only the state file (status) load this way.
	NoSecrets bool
	// Getenv looks up the variables of ${VAR} references (os.LookupEnv
	// when nil): the one way a load reads the environment.
	Getenv func(string) (string, bool)
	// CheckDSN, when set, checks each connection string once it is read
	// (the CLI parses it as the driver will): an error becomes a config
	// error at source.dsn or sink.dsn (or their dsn_file), so a malformed
	// DSN exits 2 instead of failing each run. Its text must not contain
	// the DSN's password.
	CheckDSN func(dsn string) error
	// Sinks are the kinds of sink this load accepts besides the built-in
	// ones, by sink.type: each decodes and checks keys of its own.
	Sinks map[string]SinkKind
}

func (o Options) getenv() func(string) (string, bool) {
	if o.Getenv != nil {
		return o.Getenv
	}
	return os.LookupEnv
}

// Load reads one source file, or every *.yaml/*.yml file of a folder, and
// returns the validated configs sorted by name. A file may hold several
// sources as YAML documents separated by ---.
func Load(path string) ([]*Config, error) { return LoadWith(path, Options{}) }

// LoadWith is Load with options.
func LoadWith(path string, o Options) ([]*Config, error) {
	if path == "" {
		return nil, fmt.Errorf("--config is required: pass a source file or a folder of them: %w", ErrInvalid)
	}
	loads, err := LoadEach(path, o, nil)
	if err != nil {
		return nil, err
	}
	if len(loads) == 0 {
		return nil, fmt.Errorf("%s: no *.yaml or *.yml source files in this folder: %w", path, ErrInvalid)
	}
	var out []*Config
	for _, l := range loads {
		if l.Err != nil {
			return nil, l.Err
		}
		out = append(out, l.Configs...)
	}
	if err := checkMemberNames(out); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Files lists the source files of path: path itself when it is a file,
// else the *.yaml and *.yml files of the folder, sorted (none is not an
// error here).
func Files(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w (%w)", path, err, ErrInvalid)
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	var files []string
	for _, pat := range []string{"*.yaml", "*.yml"} {
		m, _ := filepath.Glob(filepath.Join(path, pat))
		files = append(files, m...)
	}
	sort.Strings(files)
	return files, nil
}

// FileLoad is what LoadEach made of one source file.
type FileLoad struct {
	File string
	// Configs are the file's sources; for a file that failed, the ones
	// keep stood in with.
	Configs []*Config
	// Err says why the file was not loaded.
	Err error
}

// LoadEach reads the source files of path (Files) one at a time, so that a
// bad file costs only its own sources, and applies the rule that every
// source name is unique: a file that uses a name an earlier file took
// fails. keep, when set, gives the sources that stand in for a file that
// failed (a reload keeps their previous configs); they take their names
// first come, first served, and one whose name is taken is left out.
func LoadEach(path string, o Options, keep func(file string) []*Config) ([]FileLoad, error) {
	files, err := Files(path)
	if err != nil {
		return nil, err
	}
	var out []FileLoad
	seen := map[string]string{} // source name -> file
	for _, f := range files {
		cs, err := LoadFileWith(f, o)
		for _, c := range cs {
			if prev, ok := seen[c.Name]; ok && err == nil {
				err = c.Errorf("name", "source name %q is already used by %s; give each source a unique name", c.Name, prev)
			}
		}
		l := FileLoad{File: f, Err: err}
		if err != nil {
			cs = nil
			if keep != nil {
				for _, c := range keep(f) {
					if _, taken := seen[c.Name]; !taken {
						cs = append(cs, c)
					}
				}
			}
		}
		for _, c := range cs {
			seen[c.Name] = f
		}
		l.Configs = cs
		out = append(out, l)
	}
	return out, nil
}

// checkMemberNames refuses a source named like a table of a pattern source
// (shop.orders beside the pattern source shop): both would keep their
// watermark under that name.
func checkMemberNames(cfgs []*Config) error {
	for _, p := range cfgs {
		if !p.IsPattern() {
			continue
		}
		for _, c := range cfgs {
			if c != p && strings.HasPrefix(c.Name, p.Name+".") {
				return c.Errorf("name", "%q is in the names of pattern source %s (%s:%d), which names each table it syncs %s.TABLE; rename this source", c.Name, p.Name, p.File, p.Lines["name"], p.Name)
			}
		}
	}
	return nil
}

// LoadFile reads and validates a file that holds one source.
func LoadFile(file string) (*Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w (%w)", file, err, ErrInvalid)
	}
	return Parse(file, data)
}

// LoadFileWith reads and validates every source of one file.
func LoadFileWith(file string, o Options) ([]*Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w (%w)", file, err, ErrInvalid)
	}
	return ParseAll(file, data, o)
}

// Parse decodes and validates the bytes of a file that holds one source;
// file names it in errors. A file of several documents is refused here:
// load it with Load or ParseAll.
func Parse(file string, data []byte) (*Config, error) {
	cs, err := ParseAll(file, data, Options{})
	if err != nil {
		return nil, err
	}
	if len(cs) > 1 {
		return nil, cs[1].Errorf("name", "this file holds %d sources (YAML documents); load it with config.Load", len(cs))
	}
	return cs[0], nil
}

// ParseAll decodes and validates every YAML document of a file as a source.
// Line numbers in errors are the file's own, whichever document they are in;
// two documents with the same name are refused.
func ParseAll(file string, data []byte, o Options) ([]*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []*Config
	seen := map[string]int{}
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, yamlError(file, data, err)
		}
		if len(doc.Content) == 0 || isEmptyDoc(doc.Content[0]) {
			continue // an empty document, such as after a trailing ---
		}
		c := &Config{File: file, Lines: map[string]int{}, noSecrets: o.NoSecrets, sinks: o.Sinks}
		d := decoder{file: file, lines: c.Lines, noSecrets: o.NoSecrets, getenv: o.getenv(), sinks: o.Sinks}
		if err := d.decode(doc.Content[0], reflect.ValueOf(c).Elem(), ""); err != nil {
			return nil, err
		}
		if err := c.finish(); err != nil {
			return nil, err
		}
		if err := c.checkDSNs(o.CheckDSN); err != nil {
			return nil, err
		}
		if prev, ok := seen[c.Name]; ok {
			return nil, c.Errorf("name", "source name %q is already used by the document at line %d; give each source a unique name", c.Name, prev)
		}
		seen[c.Name] = c.Lines["name"]
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, &FieldError{File: file, Msg: "the file is empty; a source file needs at least name, source and sink"}
	}
	return out, nil
}

func isEmptyDoc(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

type decoder struct {
	file      string
	lines     map[string]int
	noSecrets bool // leave the dsn keys as written
	getenv    func(string) (string, bool)
	sinks     map[string]SinkKind
}

// secretKeys are the keys a load with Options.NoSecrets leaves unexpanded.
var secretKeys = map[string]bool{"source.dsn": true, "sink.dsn": true, "source.dsn_file": true, "sink.dsn_file": true}

func (d *decoder) errAt(n *yaml.Node, key, format string, args ...any) error {
	return &FieldError{File: d.file, Line: n.Line, Key: key, Msg: fmt.Sprintf(format, args...)}
}

var (
	durationType = reflect.TypeOf(Duration{})
	sizeType     = reflect.TypeOf(Size{})
)

// decode fills v from n strictly: unknown keys, wrong kinds and unset
// variables are errors that carry the node's line and the dotted key.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, key string) error {
	if n.Kind == yaml.AliasNode {
		return d.errAt(n, key, "YAML aliases are not supported; write the value out")
	}
	if key != "" {
		d.lines[key] = n.Line
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // an empty value keeps the default
	}
	switch {
	case v.Type() == durationType:
		s, err := d.scalar(n, key)
		if err != nil {
			return err
		}
		dur, err := time.ParseDuration(s)
		if err != nil || dur < 0 {
			return d.errAt(n, key, "want a duration such as 5s, 250ms or 1h, got %q", s)
		}
		v.Set(reflect.ValueOf(Duration{dur}))
		return nil
	case v.Type() == sizeType:
		s, err := d.scalar(n, key)
		if err != nil {
			return err
		}
		size, err := ParseSize(s)
		if err != nil {
			return d.errAt(n, key, "%v", err)
		}
		v.Set(reflect.ValueOf(size))
		return nil
	case v.Kind() == reflect.Pointer:
		nv := reflect.New(v.Type().Elem())
		if err := d.decode(n, nv.Elem(), key); err != nil {
			return err
		}
		v.Set(nv)
		return nil
	case v.Kind() == reflect.Struct:
		return d.decodeStruct(n, v, key)
	case v.Kind() == reflect.Map:
		return d.decodeMap(n, v, key)
	case v.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return d.errAt(n, key, "want a list such as [a, b], got %s", describe(n))
		}
		out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			if err := d.decode(item, out.Index(i), fmt.Sprintf("%s[%d]", key, i)); err != nil {
				return err
			}
		}
		v.Set(out)
		return nil
	}
	s, err := d.scalar(n, key)
	if err != nil {
		return err
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Int:
		i, err := strconv.Atoi(s)
		if err != nil {
			return d.errAt(n, key, "want a whole number, got %q", s)
		}
		v.SetInt(int64(i))
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return d.errAt(n, key, "want true or false, got %q", s)
		}
		v.SetBool(b)
	default:
		return d.errAt(n, key, "internal: unsupported field kind %s", v.Kind())
	}
	return nil
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, key string) error {
	if n.Kind != yaml.MappingNode {
		return d.errAt(n, key, "want a mapping of keys, got %s", describe(n))
	}
	fields := map[string]int{}
	var names []string
	for i := 0; i < v.NumField(); i++ {
		tag := v.Type().Field(i).Tag.Get("yaml")
		if tag == "" || tag == "-" {
			continue
		}
		fields[tag] = i
		names = append(names, tag)
	}
	// A registered kind's own keys under sink: (SinkKind.New).
	own := d.ownSettings(n, v)
	ownFields := map[string]int{}
	if own.IsValid() {
		for i := 0; i < own.NumField(); i++ {
			if tag := own.Type().Field(i).Tag.Get("yaml"); tag != "" && tag != "-" {
				ownFields[tag] = i
				names = append(names, tag)
			}
		}
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		full := kn.Value
		if key != "" {
			full = key + "." + kn.Value
		}
		idx, ok := fields[kn.Value]
		field := func(i int) reflect.Value { return v.Field(i) }
		if oi, isOwn := ownFields[kn.Value]; !ok && isOwn {
			idx, ok, field = oi, true, own.Field
		}
		if !ok {
			return d.errAt(kn, full, "unknown key; the keys here are: %s", strings.Join(names, ", "))
		}
		if seen[kn.Value] {
			return d.errAt(kn, full, "key given twice; keep one")
		}
		seen[kn.Value] = true
		d.lines[full] = kn.Line
		if err := d.decode(vn, field(idx), full); err != nil {
			return err
		}
		d.lines[full] = kn.Line
	}
	return nil
}

// decodeMap fills a map keyed by name (tables) from a mapping node: each
// value is decoded at KEY.NAME, and a name given twice is an error.
func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, key string) error {
	if n.Kind != yaml.MappingNode {
		return d.errAt(n, key, "want a mapping of names, got %s", describe(n))
	}
	out := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		full := key + "." + kn.Value
		if kn.Kind != yaml.ScalarNode || kn.Value == "" {
			return d.errAt(kn, key, "want a name as the key, got %s", describe(kn))
		}
		name := reflect.ValueOf(kn.Value)
		if out.MapIndex(name).IsValid() {
			return d.errAt(kn, full, "%q given twice; keep one", kn.Value)
		}
		elem := reflect.New(v.Type().Elem()).Elem()
		d.lines[full] = kn.Line
		if err := d.decode(vn, elem, full); err != nil {
			return err
		}
		d.lines[full] = kn.Line
		out.SetMapIndex(name, elem)
	}
	v.Set(out)
	return nil
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// scalar returns a scalar node's value with ${VAR} references expanded.
func (d *decoder) scalar(n *yaml.Node, key string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", d.errAt(n, key, "want a single value, got %s", describe(n))
	}
	if d.noSecrets && secretKeys[key] {
		return n.Value, nil
	}
	var missing string
	out := varRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
		name := varRef.FindStringSubmatch(ref)[1]
		val, ok := d.getenv(name)
		if !ok && missing == "" {
			missing = name
		}
		return val
	})
	if missing != "" {
		return "", d.errAt(n, key, "environment variable %s is not set; export it (or use an EnvironmentFile/Secret) and try again", missing)
	}
	return out, nil
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

var yamlLine = regexp.MustCompile(`line (\d+)(: )?`)

func yamlErrLine(err error) int {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// yamlErrText is a YAML error's message without "yaml: line N: ".
func yamlErrText(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	return strings.TrimSpace(yamlLine.ReplaceAllString(s, ""))
}

// SecretsLoaded reports whether the DSNs were loaded (not Options.NoSecrets):
// only then do they say which databases the source and the sink are.
func (c *Config) SecretsLoaded() bool { return !c.noSecrets }
