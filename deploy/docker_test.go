package deploy

import (
	"debug/elf"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction: its keyword and the rest.
type instruction struct{ op, arg string }

// dockerStages parses the Dockerfile into stages (each starting with FROM),
// joining continued lines and dropping comments.
func dockerStages(t *testing.T) [][]instruction {
	t.Helper()
	var stages [][]instruction
	var cont string
	for _, line := range strings.Split(readFile(t, "Dockerfile"), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || (line == "" && cont == "") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cont += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		line, cont = cont+line, ""
		op, arg, _ := strings.Cut(line, " ")
		in := instruction{strings.ToUpper(op), strings.TrimSpace(arg)}
		switch {
		case in.op == "FROM":
			stages = append(stages, []instruction{in})
		case len(stages) > 0:
			stages[len(stages)-1] = append(stages[len(stages)-1], in)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile: want a builder stage and a runtime stage, got %d stages", len(stages))
	}
	return stages
}

// last returns the argument of a stage's last instruction op ("" if none).
func last(stage []instruction, op string) string {
	out := ""
	for _, in := range stage {
		if in.op == op {
			out = in.arg
		}
	}
	return out
}

func jsonList(t *testing.T, what, s string) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatalf("Dockerfile %s %s: want the JSON (exec) form: %v", what, s, err)
	}
	return out
}

// buildCommand is the builder stage's `go build` RUN line.
func buildCommand(t *testing.T, build []instruction) string {
	t.Helper()
	for _, in := range build {
		if in.op == "RUN" && strings.Contains(in.arg, "go build") {
			return in.arg
		}
	}
	t.Fatal("Dockerfile: the builder stage has no RUN ... go build")
	return ""
}

func TestDockerfile(t *testing.T) {
	stages := dockerStages(t)
	build, final := stages[0], stages[len(stages)-1]
	if from := build[0].arg; !strings.Contains(from, "golang:") || !strings.HasSuffix(from, " AS build") {
		t.Errorf("first stage FROM %s: want a golang builder named build", from)
	}
	if from := final[0].arg; !strings.HasPrefix(from, "gcr.io/distroless/static") {
		t.Errorf("runtime FROM %s: want distroless/static (CA certificates, no shell)", from)
	}
	cmd := buildCommand(t, build)
	for _, want := range []string{"CGO_ENABLED=0", " -trimpath ", "-X github.com/syncd/syncd/cli.Version=${VERSION}", " -o /out/syncd ", "./cmd/syncd"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("the build command lacks %q: %s", want, cmd)
		}
	}
	if !slices.Contains(final, instruction{"COPY", "--from=build /out/syncd /syncd"}) {
		t.Errorf("the runtime stage does not copy /out/syncd to /syncd")
	}

	user := last(final, "USER")
	uid, err := strconv.Atoi(strings.Split(user, ":")[0])
	if err != nil || uid == 0 {
		t.Errorf("USER %q: want a numeric non-root user, so that runAsNonRoot can check it", user)
	}
	_, p := deployment(t)
	if got := num(t, "Deployment", p.spec, "securityContext", "runAsUser"); got != uid {
		t.Errorf("the Deployment runs as %d, the image as %d", got, uid)
	}

	if ep := jsonList(t, "ENTRYPOINT", last(final, "ENTRYPOINT")); !slices.Equal(ep, []string{"/syncd"}) {
		t.Errorf("ENTRYPOINT %v, want [/syncd]", ep)
	}
	args := jsonList(t, "CMD", last(final, "CMD"))
	want := []string{"run", "--config", "/etc/syncd", "--state", "/var/lib/syncd/syncd.db", "--listen", "0.0.0.0:7391"}
	if !slices.Equal(args, want) {
		t.Errorf("CMD %v, want %v", args, want)
	}
	_, f := flags(t, args)
	host, port, err := net.SplitHostPort(f["listen"])
	if err != nil || host != "0.0.0.0" {
		t.Errorf("CMD --listen %q: bind all interfaces inside a container", f["listen"])
	}
	if expose := last(final, "EXPOSE"); expose != port {
		t.Errorf("EXPOSE %s, the listener is on %s", expose, port)
	}
	stateDir := path.Dir(f["state"])
	if vols := jsonList(t, "VOLUME", last(final, "VOLUME")); !slices.Contains(vols, stateDir) {
		t.Errorf("VOLUME %v does not hold the state folder %s", vols, stateDir)
	}
	if wd := last(final, "WORKDIR"); wd != stateDir {
		t.Errorf("WORKDIR %s, want the state folder %s", wd, stateDir)
	}

	ignore := strings.Split(readFile(t, ".dockerignore"), "\n")
	for _, want := range []string{".git", "bin", "**/*.db"} {
		if !slices.Contains(ignore, want) {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}
	for _, keep := range []string{"go.mod", "go.sum", "cmd", "*.go"} {
		if slices.Contains(ignore, keep) {
			t.Errorf(".dockerignore drops %s, which the build needs", keep)
		}
	}
}

// TestDockerBuildCommand runs the Dockerfile's own `go build` line, as the
// builder stage would, and checks the result: a static binary that reports
// the version passed in. (No Docker engine is needed for this part.)
func TestDockerBuildCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	cmd := buildCommand(t, dockerStages(t)[0])
	bin := filepath.Join(t.TempDir(), "syncd")
	sh := exec.Command("sh", "-ec", strings.Replace(cmd, " -o /out/syncd ", " -o '"+bin+"' ", 1))
	sh.Dir = repoRoot
	sh.Env = append(os.Environ(), "VERSION=v0.0.0-deploy-test", "TARGETOS=linux", "TARGETARCH="+runtime.GOARCH)
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary asks for a dynamic loader: it would not run on distroless/static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary links %v", libs)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || string(out) != "syncd v0.0.0-deploy-test\n" {
		t.Errorf("syncd version: %v: %q, want the version passed as VERSION", err, out)
	}
}
