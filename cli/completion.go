package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
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

// flagNames lists a command's flags as --name.
func flagNames(name string) []string {
	var out []string
	if fs := commandFlags(name); fs != nil {
		fs.VisitAll(func(f *flag.Flag) { out = append(out, "--"+f.Name) })
	}
	return append(out, "--help")
}

func bashCompletion() string {
	var b strings.Builder
	b.WriteString("# bash completion for syncd\n_syncd() {\n")
	b.WriteString("  local cur=\"${COMP_WORDS[COMP_CWORD]}\"\n")
	fmt.Fprintf(&b, "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n    COMPREPLY=($(compgen -W %q -- \"$cur\"))\n    return\n  fi\n",
		strings.Join(append(commandNames(), "help", "--version", "--help"), " "))
	b.WriteString("  case \"${COMP_WORDS[1]}\" in\n")
	for _, name := range commandNames() {
		words := flagNames(name)
		switch name {
		case "completion":
			words = []string{"bash", "zsh", "fish"}
		}
		fmt.Fprintf(&b, "    %s) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", name, strings.Join(words, " "))
	}
	fmt.Fprintf(&b, "    help) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", strings.Join(commandNames(), " "))
	b.WriteString("  esac\n}\ncomplete -o default -F _syncd syncd\n")
	return b.String()
}

func fishCompletion() string {
	var b strings.Builder
	b.WriteString("# fish completion for syncd\ncomplete -c syncd -f\n")
	for _, name := range commandNames() {
		fmt.Fprintf(&b, "complete -c syncd -n __fish_use_subcommand -a %s\n", name)
		if name == "completion" {
			b.WriteString("complete -c syncd -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'\n")
			continue
		}
		if fs := commandFlags(name); fs != nil {
			fs.VisitAll(func(f *flag.Flag) {
				fmt.Fprintf(&b, "complete -c syncd -n '__fish_seen_subcommand_from %s' -l %s -d %s\n", name, f.Name, fishQuote(f.Usage))
			})
		}
	}
	return b.String()
}

func fishQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}
