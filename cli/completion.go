package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/syncd/syncd/config"
)

func cmdCompletion(_ context.Context, env *Env, args []string) error {
	fs := flagSet(env, "completion")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(env.Stdout, help(fs))
			return err
		}
		return fmt.Errorf("%s: %w", flagError(err), ErrUsage)
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("name one shell: syncd completion bash|zsh|fish: %w", ErrUsage)
	}
	var script string
	switch fs.Arg(0) {
	case "bash":
		script = bashCompletion()
	case "zsh":
		script = "#compdef syncd\n# zsh completion for syncd, through bash's\nautoload -U +X bashcompinit && bashcompinit\n" + bashCompletion()
	case "fish":
		script = fishCompletion()
	default:
		return fmt.Errorf("shell %q: use bash, zsh or fish: %w", fs.Arg(0), ErrUsage)
	}
	fmt.Fprint(env.Stdout, script)
	return nil
}

// completeCommand is the hidden command the completion scripts call for
// the values they cannot know: `syncd __complete sources WORDS...` prints
// the source names of the config that WORDS (the command line typed so
// far) names with --config, else of $SYNCD_CONFIG, else of /etc/syncd.
const completeCommand = "__complete"

func cmdComplete(env *Env, args []string) error {
	if len(args) == 0 || args[0] != "sources" {
		return fmt.Errorf("%s: only `sources` can be completed: %w", completeCommand, ErrUsage)
	}
	for _, name := range sourceNames(env, configWord(args[1:])) {
		fmt.Fprintln(env.Stdout, name)
	}
	return nil
}

// configWord is the value of --config among the words of a command line
// ("" when absent), written --config X, --config=X or, as bash splits
// that, --config = X.
func configWord(words []string) string {
	path := ""
	for i := 0; i < len(words); i++ {
		w := words[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
		if !strings.HasPrefix(w, "-") || name != "config" {
			continue
		}
		switch {
		case hasValue:
			path = value
		case i+2 < len(words) && words[i+1] == "=":
			path, i = words[i+2], i+2
		case i+1 < len(words):
			path, i = words[i+1], i+1
		}
	}
	if rest, ok := strings.CutPrefix(path, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			path = filepath.Join(home, rest)
		}
	}
	return path
}

// sourceNames lists the names of the sources of a config, sorted, reading
// only each document's name: no DSN, no variable and no validation is
// needed, and what cannot be read is left out.
func sourceNames(env *Env, flagValue string) []string {
	path, err := configPath(env, flagValue)
	if err != nil {
		return nil
	}
	files, err := config.Files(path)
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc struct {
				Name string `yaml:"name"`
			}
			if err := dec.Decode(&doc); err != nil {
				break
			}
			if doc.Name != "" && !seen[doc.Name] {
				seen[doc.Name] = true
				out = append(out, doc.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// flagValues is what a flag's value completes to: "yaml" (files and
// folders, *.yaml and *.yml files only), "file", "source" (the source
// names of the config) or a list of words; "" for a value the shell
// cannot guess (nothing is offered).
func flagValues(name string) string {
	switch {
	case name == "config":
		return "yaml"
	case name == "state" || strings.HasSuffix(name, "-file"):
		return "file"
	case name == "source":
		return "source"
	case name == "log-format":
		return "text json"
	case name == "log-level":
		return "debug info warn error"
	case name == "o" || name == "output":
		return "text wide json"
	}
	return ""
}

// valueFlags lists the flags of every command that take a value, by name.
func valueFlags() []string {
	seen := map[string]bool{}
	var out []string
	for _, cmd := range commandNames() {
		if fs := commandFlags(cmd); fs != nil {
			fs.VisitAll(func(f *flag.Flag) {
				if !isBool(f) && !seen[f.Name] {
					seen[f.Name] = true
					out = append(out, f.Name)
				}
			})
		}
	}
	sort.Strings(out)
	return out
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// dashed is a flag as typed: -o, --config.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// flagNames lists a command's flags as typed.
func flagNames(name string) []string {
	var out []string
	if fs := commandFlags(name); fs != nil {
		fs.VisitAll(func(f *flag.Flag) { out = append(out, dashed(f.Name)) })
	}
	return append(out, "--help")
}

func bashCompletion() string {
	var b strings.Builder
	b.WriteString(`# bash completion for syncd
_syncd() {
  local cur="${COMP_WORDS[COMP_CWORD]}" prev=""
  [ "$COMP_CWORD" -gt 0 ] && prev="${COMP_WORDS[COMP_CWORD-1]}"
  # bash splits --flag=value at "=".
  if [ "$cur" = "=" ]; then
    cur=""
  elif [ "$prev" = "=" ] && [ "$COMP_CWORD" -gt 1 ]; then
    prev="${COMP_WORDS[COMP_CWORD-2]}"
  fi
`)
	fmt.Fprintf(&b, "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n    COMPREPLY=($(compgen -W %q -- \"$cur\"))\n    return\n  fi\n",
		strings.Join(append(commandNames(), "help", "--version", "--help"), " "))
	// A flag's value: files, words, source names, or nothing.
	b.WriteString("  case \"$prev\" in\n")
	for _, name := range valueFlags() {
		pat := "-" + name + "|--" + name
		switch v := flagValues(name); v {
		case "yaml", "file":
			fmt.Fprintf(&b, "    %s) _syncd_files %s; return ;;\n", pat, v)
		case "source":
			fmt.Fprintf(&b, "    %s) COMPREPLY=($(compgen -W \"$(\"${COMP_WORDS[0]}\" %s sources \"${COMP_WORDS[@]}\" 2>/dev/null)\" -- \"$cur\")); return ;;\n", pat, completeCommand)
		case "":
			fmt.Fprintf(&b, "    %s) COMPREPLY=(); return ;;\n", pat)
		default:
			fmt.Fprintf(&b, "    %s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", pat, v)
		}
	}
	b.WriteString("  esac\n  case \"${COMP_WORDS[1]}\" in\n")
	for _, name := range commandNames() {
		words := flagNames(name)
		if name == "completion" {
			words = []string{"bash", "zsh", "fish"}
		}
		fmt.Fprintf(&b, "    %s) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", name, strings.Join(words, " "))
	}
	fmt.Fprintf(&b, "    help) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", strings.Join(commandNames(), " "))
	b.WriteString(`  esac
}
# _syncd_files completes files and folders (yaml: *.yaml and *.yml files
# only) for the word being completed.
_syncd_files() {
  local IFS=$'\n'
  if [ "$1" = yaml ]; then
    COMPREPLY=($(compgen -d -- "$cur") $(compgen -f -X '!*.y*ml' -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
  type compopt >/dev/null 2>&1 && compopt -o filenames 2>/dev/null
  return 0
}
complete -F _syncd syncd
`)
	return b.String()
}

func fishCompletion() string {
	var b strings.Builder
	fmt.Fprintf(&b, `# fish completion for syncd
complete -c syncd -f
function __syncd_sources
    set -l words (commandline -opc)
    $words[1] %s sources $words[2..-1] 2>/dev/null
end
`, completeCommand)
	for _, name := range commandNames() {
		fmt.Fprintf(&b, "complete -c syncd -n __fish_use_subcommand -a %s\n", name)
		if name == "completion" {
			b.WriteString("complete -c syncd -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'\n")
			continue
		}
		fs := commandFlags(name)
		if fs == nil {
			continue
		}
		fs.VisitAll(func(f *flag.Flag) {
			opt := "-l " + f.Name
			if len(f.Name) == 1 {
				opt = "-s " + f.Name
			}
			value := ""
			if !isBool(f) {
				switch v := flagValues(f.Name); v {
				case "yaml", "file":
					value = " -r -F"
				case "source":
					value = " -x -a '(__syncd_sources)'"
				case "":
					value = " -x"
				default:
					value = " -x -a " + fishQuote(v)
				}
			}
			fmt.Fprintf(&b, "complete -c syncd -n '__fish_seen_subcommand_from %s' %s%s -d %s\n", name, opt, value, fishQuote(f.Usage))
		})
	}
	return b.String()
}

func fishQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}
