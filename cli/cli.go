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
	"strings"
	"sync"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
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
	// Getenv reads the environment (os.Getenv when nil).
	Getenv func(string) string
	// Logger is built by Run from --log-level and the terminal.
	Logger *slog.Logger
	scrub  *scrubber
}

const usage = `syncd keeps a copy of PostgreSQL tables in sync by an (updated_at, id) cursor.

Usage:
  syncd run       --config PATH [--state FILE] [--once] [--source NAME]
                  without --once: [--listen ADDR] [--shutdown-timeout 30s] [--admin-token-file FILE]
  syncd resync    --config PATH [--state FILE] --source NAME (--from RFC3339 | --from-start) [--listen ADDR]
  syncd status    --config PATH [--state FILE] [--json] [--listen ADDR]
  syncd validate  --config PATH [--state FILE]
  syncd reconcile --config PATH [--state FILE] --source NAME [--repair] [--json]
  syncd version

--config takes one source file or a folder of *.yaml files. --state defaults
to $SYNCD_STATE, else ./syncd.db. Without --once, run is a daemon that runs
each source on its schedule until SIGTERM/SIGINT (SIGHUP reloads the configs)
and serves /healthz /readyz /metrics /status on --listen (default
127.0.0.1:7391). When the daemon holds the state file, status and resync
go through its admin socket STATE.sock, or over TCP with --listen ADDR
(resync then sends the admin token, $SYNCD_ADMIN_TOKEN or
--admin-token-file, once the daemon has proved it holds the state file).
Exit codes: 0 ok, 1 failure or differences found, 2 usage or config error.
`

type command func(ctx context.Context, env *Env, args []string) error

var commands map[string]command

func init() {
	commands = map[string]command{
		"run":       cmdRun,
		"resync":    cmdResync,
		"status":    cmdStatus,
		"validate":  cmdValidate,
		"reconcile": cmdReconcile,
		"version":   cmdVersion,
	}
}

// Version is set at build time with -ldflags "-X github.com/syncd/syncd/cli.Version=...".
var Version = "dev"

// Run runs one syncd command line (without the program name). Errors have
// been written to env.Stderr by the time it returns; the caller only maps
// the error to an exit code.
func Run(ctx context.Context, env *Env, args []string) error {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	env.scrub = &scrubber{w: env.Stderr}
	env.Stderr = env.scrub
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(env.Stdout, usage)
		if len(args) == 0 {
			return fmt.Errorf("no command given: %w", ErrUsage)
		}
		return nil
	}
	cmd, ok := commands[args[0]]
	if !ok {
		err := fmt.Errorf("unknown command %q; run `syncd help` for the list: %w", args[0], ErrUsage)
		fmt.Fprintln(env.Stderr, "syncd:", err)
		return err
	}
	err := cmd(ctx, env, args[1:])
	if err != nil && !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errReported) {
		fmt.Fprintln(env.Stderr, "syncd "+args[0]+": "+oneLine(err.Error()))
	}
	return err
}

// errReported wraps an error that the command already printed.
var errReported = errors.New("reported")

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// flagSet makes a command's flag set that reports errors as usage errors.
func flagSet(env *Env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("syncd "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	return fs
}

// common holds the flags most commands share.
type common struct {
	config   string
	state    string
	logLevel string
}

func (c *common) register(fs *flag.FlagSet, state bool) {
	fs.StringVar(&c.config, "config", "", "source file or folder of *.yaml source files (required)")
	if state {
		fs.StringVar(&c.state, "state", "", "state file (default $SYNCD_STATE, else ./syncd.db)")
	}
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
}

func parse(env *Env, fs *flag.FlagSet, args []string, c *common) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%v: %w", err, ErrUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: %w", fs.Arg(0), ErrUsage)
	}
	if c.config == "" {
		return fmt.Errorf("--config is required: pass a source file or a folder of them: %w", ErrUsage)
	}
	c.state = cmp.Or(c.state, env.Getenv("SYNCD_STATE"), "syncd.db")
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: use debug, info, warn or error: %w", c.logLevel, ErrUsage)
	}
	env.Logger = newLogger(env.Stderr, lvl)
	return nil
}

// load reads the configs, registers their passwords for scrubbing, and
// keeps only the named source when name is set.
func load(env *Env, path, name string) ([]*config.Config, error) {
	cfgs, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	for _, c := range cfgs {
		env.scrub.add(pgutil.Password(c.Source.DSN))
		env.scrub.add(pgutil.Password(c.Sink.DSN))
	}
	if name == "" {
		return cfgs, nil
	}
	var names []string
	for _, c := range cfgs {
		if c.Name == name {
			return []*config.Config{c}, nil
		}
		names = append(names, c.Name)
	}
	return nil, fmt.Errorf("--source %q is not in %s (sources: %s): %w", name, path, strings.Join(names, ", "), ErrUsage)
}

// openState opens the state file, waiting briefly for another process.
func openState(path string) (*watermark.Store, error) {
	return watermark.Open(path, 2*time.Second)
}

func newLogger(w io.Writer, lvl slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: lvl}
	if isTerminal(w) {
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

func cmdVersion(_ context.Context, env *Env, _ []string) error {
	fmt.Fprintln(env.Stdout, "syncd", Version)
	return nil
}
