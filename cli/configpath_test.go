package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Without --config and $SYNCD_CONFIG the commands read the default folder
// when it holds a source file, and say so when it holds none.
func TestConfigPathDefaultFolder(t *testing.T) {
	dir := t.TempDir()
	defer func(old string) { defaultConfig = old }(defaultConfig)
	defaultConfig = dir
	env := &Env{Getenv: func(string) (string, bool) { return "", false }}
	_, err := configPath(env, "")
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), dir+" holds no *.yaml or *.yml file") {
		t.Fatalf("empty default folder: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "syncd.yaml"), []byte("name: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := configPath(env, ""); err != nil || p != dir {
		t.Fatalf("default folder with syncd.yaml: %q, %v; want %q", p, err, dir)
	}
	if p, err := configPath(env, "given.yaml"); err != nil || p != "given.yaml" {
		t.Fatalf("--config given: %q, %v", p, err)
	}
}
