package deploy

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// pod is what the tests learn about one pod template running syncd.
type pod struct {
	what      string
	spec      any
	container any
	cmd       string
	flags     map[string]string
	env       map[string]env
	envFrom   []string // the Secrets of envFrom
	// The ConfigMap mounted at configMount, and its items (nil: every key).
	configMap   string
	configMount string
	items       []any
}

// secretKeys are the keys of the example Secret that the manifests read.
func secretKeys(t *testing.T) map[string]bool {
	t.Helper()
	s := find(t, loadDocs(t, "deploy/kubernetes/secret.example.yaml"), "Secret", "syncd-dsn")
	keys := map[string]bool{}
	for k := range dig(s, "stringData").(obj) {
		keys[k] = true
	}
	return keys
}

var argRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// stateVolume is the kind of volume a pod keeps its state file on.
type stateVolume int

const (
	// statePVC: a PersistentVolumeClaim, for a pod that runs alone (the
	// CronJob, a campaign Job): its state file outlives it.
	statePVC stateVolume = iota
	// stateEmptyDir: an emptyDir, for a replica of the fleet: its state
	// file is a cache of the pod, and the sink's record is the truth.
	stateEmptyDir
)

// checkPod asserts what every pod template running syncd must get right and
// returns its facts; its state file must be on a volume of the kind state.
func checkPod(t *testing.T, what string, spec any, state stateVolume) pod {
	t.Helper()
	p := pod{what: what, spec: spec}

	if dig(spec, "securityContext", "runAsNonRoot") != true {
		t.Errorf("%s: securityContext.runAsNonRoot must be true", what)
	}
	if uid := num(t, what, spec, "securityContext", "runAsUser"); uid == 0 {
		t.Errorf("%s: runAsUser 0 is root", what)
	}
	if got := dig(spec, "securityContext", "seccompProfile", "type"); got != "RuntimeDefault" {
		t.Errorf("%s: seccompProfile.type = %v, want RuntimeDefault", what, got)
	}
	if dig(spec, "automountServiceAccountToken") != false {
		t.Errorf("%s: syncd never calls the Kubernetes API; set automountServiceAccountToken: false", what)
	}

	containers := list(spec, "containers")
	if len(containers) != 1 || dig(containers[0], "name") != "syncd" {
		t.Fatalf("%s: want exactly one container named syncd, got %v", what, containers)
	}
	c := containers[0]
	p.container = c
	if str(t, what, c, "image") == "" {
		t.Errorf("%s: empty image", what)
	}
	var args []string
	for _, a := range list(c, "args") {
		args = append(args, fmt.Sprint(a))
	}
	if dig(c, "command") != nil {
		t.Errorf("%s: keep the image's ENTRYPOINT /syncd; pass only args", what)
	}
	p.cmd, p.flags = flags(t, args)
	if p.cmd != "run" {
		t.Errorf("%s: command %q, want run", what, p.cmd)
	}
	p.env = containerEnv(t, c)
	for _, f := range list(c, "envFrom") {
		if dig(f, "secretRef") == nil {
			t.Errorf("%s: envFrom %v: take variables from the Secret only", what, f)
			continue
		}
		p.envFrom = append(p.envFrom, str(t, what, f, "secretRef", "name"))
	}
	for _, m := range argRef.FindAllStringSubmatch(strings.Join(args, " "), -1) {
		if _, ok := p.env[m[1]]; !ok {
			t.Errorf("%s: args use $(%s) but the container does not set it (Kubernetes would pass it literally)", what, m[1])
		}
	}
	keys := secretKeys(t)
	for _, s := range p.envFrom {
		if s != "syncd-dsn" {
			t.Errorf("%s: envFrom reads secret %s; the manifests' Secret is syncd-dsn (secret.example.yaml)", what, s)
		}
	}
	for name, e := range p.env {
		if e.Secret == "" {
			continue
		}
		if e.Secret != "syncd-dsn" || !keys[e.Key] {
			t.Errorf("%s: env %s reads secret %s key %s, which secret.example.yaml does not define", what, name, e.Secret, e.Key)
		}
	}

	sc := dig(c, "securityContext")
	if dig(sc, "readOnlyRootFilesystem") != true {
		t.Errorf("%s: container readOnlyRootFilesystem must be true", what)
	}
	if dig(sc, "allowPrivilegeEscalation") != false {
		t.Errorf("%s: container allowPrivilegeEscalation must be false", what)
	}
	if drop := list(sc, "capabilities", "drop"); len(drop) != 1 || drop[0] != "ALL" {
		t.Errorf("%s: capabilities.drop = %v, want [ALL]", what, drop)
	}
	for _, r := range [][]any{{"requests", "cpu"}, {"requests", "memory"}, {"limits", "memory"}} {
		if dig(c, append([]any{"resources"}, r...)...) == nil {
			t.Errorf("%s: resources.%s.%s is not set", what, r[0], r[1])
		}
	}

	grace := num(t, what, spec, "terminationGracePeriodSeconds")
	if timeout := shutdownTimeout(t, p.flags); float64(grace) <= timeout.Seconds() {
		t.Errorf("%s: terminationGracePeriodSeconds %d must exceed --shutdown-timeout %s, or the kubelet kills syncd before it commits the page in flight", what, grace, timeout)
	}

	volumes := map[string]any{}
	for _, v := range list(spec, "volumes") {
		volumes[str(t, what, v, "name")] = v
	}
	mounts := map[string]any{} // mountPath -> mount
	for _, m := range list(c, "volumeMounts") {
		mounts[str(t, what, m, "mountPath")] = m
	}

	stateFile := p.flags["state"]
	if !path.IsAbs(stateFile) {
		t.Fatalf("%s: --state %q must be an absolute path on the state volume", what, stateFile)
	}
	sm, ok := mounts[path.Dir(stateFile)]
	if !ok {
		t.Fatalf("%s: no volume is mounted at %s, the folder of --state %s: the root filesystem is read-only", what, path.Dir(stateFile), stateFile)
	}
	if dig(sm, "readOnly") == true {
		t.Errorf("%s: the state volume is mounted read-only", what)
	}
	vol := str(t, what, sm, "name")
	switch state {
	case statePVC:
		if dig(volumes[vol], "persistentVolumeClaim", "claimName") == nil {
			t.Errorf("%s: the state volume %q is not a PersistentVolumeClaim: the watermarks would be lost with the pod", what, vol)
		}
	case stateEmptyDir:
		if v, ok := volumes[vol].(obj); !ok || !slices.Contains(mapKeys(v), "emptyDir") {
			t.Errorf("%s: the state volume %q is not an emptyDir: a replica's state file is a cache, and a volume per pod pins it", what, vol)
		}
	}

	cfg := p.flags["config"]
	for mp, m := range mounts {
		if cfg == mp || strings.HasPrefix(cfg, mp+"/") {
			p.configMount = mp
			if dig(m, "readOnly") != true {
				t.Errorf("%s: mount the sources at %s read-only", what, mp)
			}
			v := volumes[str(t, what, m, "name")]
			p.configMap = str(t, what, v, "configMap", "name")
			p.items = list(v, "configMap", "items")
		}
	}
	if p.configMap == "" {
		t.Fatalf("%s: --config %s is on no ConfigMap volume", what, cfg)
	}
	return p
}

// sources returns the files a ConfigMap volume shows (path relative to the
// filesystem root -> contents) and the folder --config names for pod index.
func (p pod) sources(t *testing.T, maps []obj, index int) (map[string]string, string) {
	t.Helper()
	data := dig(find(t, maps, "ConfigMap", p.configMap), "data").(obj)
	files := map[string]string{}
	if p.items == nil {
		for k, v := range data {
			files[path.Join(p.configMount, k)] = v.(string)
		}
	}
	for _, it := range p.items {
		key := str(t, p.what, it, "key")
		body, ok := data[key].(string)
		if !ok {
			t.Fatalf("%s: volume item %s is not a key of ConfigMap %s", p.what, key, p.configMap)
		}
		files[path.Join(p.configMount, str(t, p.what, it, "path"))] = body
	}
	dir := strings.ReplaceAll(p.flags["config"], "$(POD_INDEX)", strconv.Itoa(index))
	return files, dir
}

// load loads the sources the pod with this index sees, with the variables its
// container sets, after checking that each ${VAR} the files use comes from
// the Secret. It returns the source names.
func (p pod) load(t *testing.T, maps []obj, index int) []string {
	t.Helper()
	files, dir := p.sources(t, maps, index)
	mine := map[string]string{}
	for f, body := range files {
		if path.Dir(f) == dir {
			mine[f] = body
		}
	}
	vars := varRefs(mine)
	keys := secretKeys(t)
	for _, v := range vars {
		if e, ok := p.env[v]; ok && e.Secret != "" {
			continue
		}
		if _, set := p.env[v]; !set && slices.Contains(p.envFrom, "syncd-dsn") && keys[v] {
			continue
		}
		t.Errorf("%s (index %d): the sources reference ${%s}, which the container does not take from a Secret", p.what, index, v)
	}
	return loadSources(t, files, strings.TrimPrefix(dir, "/"), vars)
}

// port resolves a probe or Service port (a name or a number) to the
// container's port number.
func (p pod) port(t *testing.T, ref any) int {
	t.Helper()
	for _, cp := range list(p.container, "ports") {
		if dig(cp, "name") == ref || dig(cp, "containerPort") == ref {
			return num(t, p.what, cp, "containerPort")
		}
	}
	t.Fatalf("%s: port %v is not a container port", p.what, ref)
	return 0
}
