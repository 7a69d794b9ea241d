// Package cli implements the syncd command line: it parses each command's
// flags, loads the configs, wires the packages together and turns every
// outcome into an error whose class decides the exit code (see ExitCode).
package cli

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/watermark"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1 // a run failed, or differences were found
	ExitUsage   = 2 // bad flags or a bad config
)

// ErrUsage marks a command-line mistake.
var ErrUsage = errors.New("usage error")

// ErrDifferences marks a successful check that found differences (exit 1).
var ErrDifferences = errors.New("differences found")

// ExitCode maps an error returned by Run to the process exit code.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrUsage), errors.Is(err, config.ErrInvalid), errors.Is(err, flag.ErrHelp):
		return ExitUsage
	}
	return ExitFailure
}

// Env is what a command talks to.
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
	// Getenv looks up the environment (os.LookupEnv when nil): the
	// commands' $SYNCD_* defaults and the configs' ${VAR} references.
	Getenv func(string) (string, bool)
	// Logger is built by Run from --log-level and the terminal.
	Logger *slog.Logger
	// Kinds are the kinds of sink the commands know (DefaultKinds when
	// nil): the config load accepts their keys, and every run, reconcile
	// and resync looks a source's kind up here.
	Kinds *kind.Registry
	scrub *scrubber
	// flags, when set, receives each command's flag set (help and
	// completion read a command's flags this way).
	flags **flag.FlagSet
}

// getenv is the value of variable k, "" when it is not set.
func (env *Env) getenv(k string) string {
	v, _ := env.Getenv(k)
	return v
}

const usage = `syncd keeps a copy of PostgreSQL tables in sync by an (updated_at, id) cursor.

Usage:
  syncd run        sync every source: as a daemon, or once with --once
  syncd resync     move a source's watermark back
  syncd status     print each source's watermark and last run
  syncd validate   check the configs against the databases
  syncd reconcile  compare the copy with the source value by value
  syncd version    print the version (also: syncd -v, syncd --version)
  syncd completion print a shell completion script (bash, zsh or fish)
  syncd help CMD   print a command's help (also: syncd CMD --help)

--config takes one source file or a folder of *.yaml files; it defaults to
$SYNCD_CONFIG, else /etc/syncd. --state defaults to $SYNCD_STATE, else
./syncd.db. When the daemon holds the state file, status and resync go
through its admin socket STATE.sock, or over TCP with --listen ADDR (resync
then sends the admin token, $SYNCD_ADMIN_TOKEN or --admin-token-file, once
the daemon has proved it holds the state file).
Exit codes: 0 ok, 1 failure or differences found, 2 usage or config error.
`

type command func(ctx context.Context, env *Env, args []string) error

var commands map[string]command

func init() {
	commands = map[string]command{
		"run":        cmdRun,
		"resync":     cmdResync,
		"status":     cmdStatus,
		"validate":   cmdValidate,
		"reconcile":  cmdReconcile,
		"version":    cmdVersion,
		"completion": cmdCompletion,
	}
}

// Version is set at build time with -ldflags "-X github.com/syncd/syncd/cli.Version=...".
var Version = "dev"

// Run runs one syncd command line (without the program name). Errors have
// been written to env.Stderr by the time it returns; the caller only maps
// the error to an exit code.
func Run(ctx context.Context, env *Env, args []string) error {
	if env.Getenv == nil {
		env.Getenv = os.LookupEnv
	}
	if env.Kinds == nil {
		env.Kinds = DefaultKinds()
	}
	env.scrub = &scrubber{w: env.Stderr}
	env.Stderr = env.scrub
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fmt.Fprint(env.Stdout, usage)
		if len(args) == 0 {
			return fmt.Errorf("no command given: %w", ErrUsage)
		}
		return nil
	}
	switch args[0] {
	case "--version", "-version", "-v":
		args = []string{"version"}
	case "help":
		if len(args) == 1 {
			fmt.Fprint(env.Stdout, usage)
			return nil
		}
		args = []string{args[1], "--help"}
	}
	if args[0] == completeCommand {
		return cmdComplete(env, args[1:])
	}
	cmd, ok := commands[args[0]]
	if !ok {
		err := fmt.Errorf("unknown command %q; run `syncd help` for the list: %w", args[0], ErrUsage)
		fmt.Fprintln(env.Stderr, "syncd:", err)
		return err
	}
	err := cmd(ctx, env, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil // the command printed its help to stdout
	}
	if err != nil && !errors.Is(err, errReported) {
		fmt.Fprintln(env.Stderr, "syncd "+args[0]+": "+oneLine(err.Error()))
	}
	return err
}

// errReported wraps an error that the command already printed.
var errReported = errors.New("reported")

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// flagSet makes a command's flag set. It prints nothing itself: parse
// prints the help to stdout for -h/--help, and Run prints a bad flag as one
// line on stderr.
func flagSet(env *Env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("syncd "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if env.flags != nil {
		*env.flags = fs
	}
	return fs
}

// common holds the flags most commands share.
type common struct {
	config    string
	state     string
	logLevel  string
	logFormat string
}

func (c *common) register(fs *flag.FlagSet, state bool) {
	fs.StringVar(&c.config, "config", "", "source file or folder of *.yaml source files (default $SYNCD_CONFIG, else "+DefaultConfig+")")
	if state {
		fs.StringVar(&c.state, "state", "", "state file (default $SYNCD_STATE, else ./syncd.db)")
	}
	registerLog(fs, c)
}

func registerLog(fs *flag.FlagSet, c *common) {
	fs.StringVar(&c.logLevel, "log-level", "", "debug, info, warn or error (default $SYNCD_LOG_LEVEL, else info)")
	fs.StringVar(&c.logFormat, "log-format", "", "text or json (default $SYNCD_LOG_FORMAT, else text on a terminal and json otherwise)")
}

func parse(env *Env, fs *flag.FlagSet, args []string, c *common) error {
	if err := parseFlags(env, fs, args); err != nil {
		return err
	}
	path, err := configPath(env, c.config)
	if err != nil {
		return err
	}
	c.config = path
	c.state = cmp.Or(c.state, env.getenv("SYNCD_STATE"), "syncd.db")
	return setLogger(env, c)
}

// DefaultConfig is the folder of source files the commands read when
// neither --config nor $SYNCD_CONFIG names one.
const DefaultConfig = "/etc/syncd"

// defaultConfig is DefaultConfig, a variable for the tests.
var defaultConfig = DefaultConfig

// configPath is the config to load: --config, else $SYNCD_CONFIG, else
// DefaultConfig when it holds a source file; with none of them it is a
// usage error that says how to give one.
func configPath(env *Env, flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if v := env.getenv("SYNCD_CONFIG"); v != "" {
		if _, err := os.Stat(v); err != nil {
			return "", fmt.Errorf("$SYNCD_CONFIG names %s: %w; point it (or --config) at a source file or a folder of them: %w", v, err, ErrUsage)
		}
		return v, nil
	}
	why := "does not exist"
	if st, err := os.Stat(defaultConfig); err == nil {
		if !st.IsDir() {
			return defaultConfig, nil // a file: load it, or say what is wrong with it
		}
		if files, err := config.Files(defaultConfig); err == nil && len(files) > 0 {
			return defaultConfig, nil
		}
		why = "holds no *.yaml or *.yml file"
	}
	return "", fmt.Errorf("--config is required: it was not given, $SYNCD_CONFIG is not set and %s %s; pass --config FILE or FOLDER, set SYNCD_CONFIG, or put the source files (*.yaml) in %s: %w",
		defaultConfig, why, defaultConfig, ErrUsage)
}

// parseFlags parses a command's flags; -h/--help prints the command's help
// to stdout and returns flag.ErrHelp, which Run turns into exit 0.
func parseFlags(env *Env, fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(env.Stdout, help(fs))
			return err
		}
		return fmt.Errorf("%s; run `%s --help` for its flags: %w", flagError(err), fs.Name(), ErrUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: %w", fs.Arg(0), ErrUsage)
	}
	return nil
}

// flagError is a flag package error with the flag written as the help
// writes it, --name: the package writes "-name" whichever way it was typed.
func flagError(err error) string {
	return flagInError.ReplaceAllStringFunc(err.Error(), func(m string) string {
		sub := flagInError.FindStringSubmatch(m)
		if len(sub[2]) == 1 {
			return sub[1] + "-" + sub[2] // a one-letter flag: -o
		}
		return sub[1] + "--" + sub[2]
	})
}

// flagInError finds the flag name in the flag package's errors: "...
// defined: -x", "needs an argument: -x", "for -x:", "for flag -x:".
var flagInError = regexp.MustCompile(`((?:defined|argument): |for (?:flag )?)-([^-\s:][^\s:]*)`)

// setLogger builds env.Logger from --log-level and --log-format, each
// falling back on $SYNCD_LOG_LEVEL / $SYNCD_LOG_FORMAT (the flag wins).
func setLogger(env *Env, c *common) error {
	level := cmp.Or(c.logLevel, env.getenv("SYNCD_LOG_LEVEL"), "info")
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("log level %q (--log-level or $SYNCD_LOG_LEVEL): use debug, info, warn or error: %w", level, ErrUsage)
	}
	format := cmp.Or(c.logFormat, env.getenv("SYNCD_LOG_FORMAT"))
	switch format {
	case "", "text", "json":
	default:
		return fmt.Errorf("log format %q (--log-format or $SYNCD_LOG_FORMAT): use text or json: %w", format, ErrUsage)
	}
	env.Logger = newLogger(env.Stderr, lvl, format)
	return nil
}

// openState opens the state file, waiting briefly for another process.
func openState(path string) (*watermark.Store, error) {
	return watermark.Open(path, 2*time.Second)
}

// newLogger logs to w as format ("text" or "json"; "": text on a terminal,
// JSON otherwise).
func newLogger(w io.Writer, lvl slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "text" || format == "" && isTerminal(w) {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func isTerminal(w io.Writer) bool {
	if s, ok := w.(*scrubber); ok {
		w = s.w
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// scrubber replaces known secrets in everything written through it.
type scrubber struct {
	mu      sync.Mutex
	w       io.Writer
	secrets [][]byte
}

func (s *scrubber) add(secret string) {
	if len(secret) < 3 {
		return // too short to replace without mangling ordinary text
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secrets = append(s.secrets, []byte(secret))
}

func (s *scrubber) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := p
	for _, sec := range s.secrets {
		if bytes.Contains(out, sec) {
			out = bytes.ReplaceAll(out, sec, []byte("xxxxx"))
		}
	}
	if _, err := s.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

func cmdVersion(_ context.Context, env *Env, args []string) error {
	if err := parseFlags(env, flagSet(env, "version"), args); err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, "syncd", Version)
	return nil
}
