package deploy

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const unitFile = "deploy/systemd/syncd.service"

// unit is a parsed systemd unit: section -> key -> every value given.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, text string) unit {
	t.Helper()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" || strings.HasSuffix(line, `\`) {
				t.Fatalf("%s:%d: cannot parse %q", unitFile, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// one returns the only value of a [Service] key.
func (u unit) one(t *testing.T, key string) string {
	t.Helper()
	v := u["Service"][key]
	if len(v) != 1 {
		t.Fatalf("%s: [Service] %s is given %d times, want once", unitFile, key, len(v))
	}
	return v[0]
}

// seconds parses a systemd time span written as "45", "45s" or "2min".
func seconds(t *testing.T, s string) time.Duration {
	t.Helper()
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(n) * time.Second
	}
	d, err := time.ParseDuration(strings.ReplaceAll(s, "min", "m"))
	if err != nil {
		t.Fatalf("time span %q: %v", s, err)
	}
	return d
}

func TestSystemdUnit(t *testing.T) {
	u := parseUnit(t, readFile(t, unitFile))
	argv := strings.Fields(u.one(t, "ExecStart"))
	if argv[0] != "/usr/local/bin/syncd" {
		t.Errorf("ExecStart runs %s; `make install` puts syncd in /usr/local/bin", argv[0])
	}
	cmd, f := flags(t, argv[1:])
	if cmd != "run" || f["once"] != "" {
		t.Errorf("ExecStart %v: want the daemon, run without --once", argv)
	}
	if want := "/etc/" + u.one(t, "ConfigurationDirectory"); f["config"] != want {
		t.Errorf("--config %s, want %s (ConfigurationDirectory)", f["config"], want)
	}
	if want := "/var/lib/" + u.one(t, "StateDirectory"); path.Dir(f["state"]) != want {
		t.Errorf("--state %s is not in %s, the StateDirectory the service may write", f["state"], want)
	}
	if host, _, err := net.SplitHostPort(f["listen"]); err != nil || host != "127.0.0.1" {
		t.Errorf("--listen %q: keep the HTTP listener on loopback on a host", f["listen"])
	}
	if stop, timeout := seconds(t, u.one(t, "TimeoutStopSec")), shutdownTimeout(t, f); stop <= timeout {
		t.Errorf("TimeoutStopSec %s must exceed --shutdown-timeout %s, or systemd kills syncd before it commits the page in flight", stop, timeout)
	}
	want := map[string]string{
		"ExecReload":               "/bin/kill -HUP $MAINPID",
		"KillSignal":               "SIGTERM",
		"Restart":                  "on-failure",
		"RestartPreventExitStatus": "2",
		"EnvironmentFile":          "-" + f["config"] + "/syncd.env",
		"DynamicUser":              "yes",
		"NoNewPrivileges":          "yes",
		"ProtectSystem":            "strict",
		"ProtectHome":              "yes",
		"PrivateTmp":               "yes",
		"PrivateDevices":           "yes",
		"ProtectKernelTunables":    "yes",
		"ProtectKernelModules":     "yes",
		"ProtectKernelLogs":        "yes",
		"ProtectControlGroups":     "yes",
		"RestrictAddressFamilies":  "AF_INET AF_INET6 AF_UNIX",
		"RestrictNamespaces":       "yes",
		"MemoryDenyWriteExecute":   "yes",
		"LockPersonality":          "yes",
		"CapabilityBoundingSet":    "",
		"UMask":                    "0077",
	}
	for k, v := range want {
		if got := u.one(t, k); got != v {
			t.Errorf("%s=%s, want %s=%s", k, got, k, v)
		}
	}
	if !slices.Contains(u["Service"]["SystemCallFilter"], "@system-service") {
		t.Errorf("SystemCallFilter %v lacks @system-service", u["Service"]["SystemCallFilter"])
	}
	if u["Install"]["WantedBy"] == nil {
		t.Errorf("no [Install] WantedBy: systemctl enable would do nothing")
	}
}

// TestSystemdEnvExample loads the example sources as /etc/syncd/*.yaml with
// exactly the variables syncd.env.example sets.
func TestSystemdEnvExample(t *testing.T) {
	vars := map[string]bool{}
	for n, line := range strings.Split(readFile(t, "deploy/systemd/syncd.env.example"), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		quoted := len(v) > 2 && v[0] == '\'' && v[len(v)-1] == '\'' && !strings.Contains(v[1:len(v)-1], "'")
		if !ok || k == "" || !quoted || vars[k] {
			t.Errorf("syncd.env.example:%d: %q: want one NAME='value' per name (quoted, so that a shell can source it)", n+1, line)
		}
		vars[k] = true
	}
	if !vars["SYNCD_ADMIN_TOKEN"] {
		t.Errorf("syncd.env.example does not set SYNCD_ADMIN_TOKEN")
	}
	files := map[string]string{}
	for k, v := range dig(find(t, loadDocs(t, k8s+"configmap.yaml"), "ConfigMap", "syncd-sources"), "data").(obj) {
		files["etc/syncd/"+k] = v.(string)
	}
	refs := varRefs(files)
	for _, v := range refs {
		if !vars[v] {
			t.Errorf("the example sources reference ${%s}; syncd.env.example does not set it", v)
		}
	}
	if names := loadSources(t, files, "etc/syncd", refs); len(names) != len(files) {
		t.Errorf("loaded %v from %d files", names, len(files))
	}
}

// TestSystemdAnalyze runs systemd's own checks on the unit in a scratch root:
// `verify` must print nothing (it exits 0 even on unknown keys), and the
// offline `security` exposure must stay at or below 2.0 ("OK").
func TestSystemdAnalyze(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	root := t.TempDir()
	units := filepath.Join(root, "usr/lib/systemd")
	if err := os.MkdirAll(units, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", "/usr/lib/systemd/system", units).CombinedOutput(); err != nil {
		t.Fatalf("copy the system's units: %v: %s", err, out)
	}
	for _, exe := range []string{"usr/local/bin/syncd", "bin/kill"} {
		p := filepath.Join(root, exe)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(root, "etc/systemd/system/syncd.service")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, []byte(readFile(t, unitFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", "--man=no", "--root="+root, "syncd.service").CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(sa, "security", "--offline=yes", "--threshold=20", "--root="+root, "syncd.service").CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil {
		t.Errorf("systemd-analyze security: %v\n%s", err, out)
	}
	t.Log(lines[len(lines)-1])
}
