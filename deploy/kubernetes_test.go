package deploy

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const k8s = "deploy/kubernetes/"

func sourceMaps(t *testing.T) []obj {
	return append(loadDocs(t, k8s+"configmap.yaml"), loadDocs(t, k8s+"cronjob.yaml")...)
}

// deployment returns the Deployment syncd and the facts of its pod. Its
// state file lives on an emptyDir: a cache, the sink's record is the truth.
func deployment(t *testing.T) (obj, pod) {
	t.Helper()
	d := find(t, loadDocs(t, k8s+"deployment.yaml"), "Deployment", "syncd")
	return d, checkPod(t, "Deployment syncd", dig(d, "spec", "template", "spec"), stateEmptyDir)
}

// TestDeploymentIsAFleet checks the default manifest: identical replicas
// that each load every source file (no shards, no per-pod config), with
// the DSNs from the Secret by envFrom, a PodDisruptionBudget that keeps
// all but one replica through a drain, and replicas spread over nodes.
func TestDeploymentIsAFleet(t *testing.T) {
	d, p := deployment(t)
	if p.flags["once"] != "" {
		t.Fatalf("the Deployment runs the daemon; drop --once")
	}
	if strings.Contains(strings.Join(mapKeys(p.flags), " ")+" "+p.flags["config"]+" "+p.flags["state"], "$(") {
		t.Errorf("the Deployment's args %v depend on the pod: every replica must run the same configuration", p.flags)
	}
	replicas := num(t, "Deployment", d, "spec", "replicas")
	if replicas < 2 {
		t.Errorf("replicas %d: a fleet needs at least 2, so that one takes over the sources of another", replicas)
	}
	if p.items != nil {
		t.Errorf("the sources volume maps items %v: every replica must see every file", p.items)
	}
	if len(p.envFrom) != 1 || p.envFrom[0] != "syncd-dsn" {
		t.Errorf("envFrom %v: want the Secret syncd-dsn, whose keys are the variables the source files use", p.envFrom)
	}
	maps := sourceMaps(t)
	keys := mapKeys(dig(find(t, maps, "ConfigMap", p.configMap), "data").(obj))
	if names := p.load(t, maps, 0); len(names) != len(keys) {
		t.Errorf("a replica runs %v; the ConfigMap has %d files: every replica must load them all", names, len(keys))
	}
	if got := dig(d, "spec", "strategy", "type"); got != "RollingUpdate" {
		t.Errorf("strategy %v, want RollingUpdate: the replicas go on while a pod is replaced", got)
	}
	spread := list(d, "spec", "template", "spec", "topologySpreadConstraints")
	if len(spread) == 0 || dig(spread[0], "topologyKey") != "kubernetes.io/hostname" {
		t.Errorf("topologySpreadConstraints %v: spread the replicas over nodes first, so that a lost node leaves others", spread)
	}

	pdb := find(t, loadDocs(t, k8s+"pdb.yaml"), "PodDisruptionBudget", "syncd")
	labels := dig(d, "spec", "template", "metadata", "labels").(obj)
	for k, v := range dig(pdb, "spec", "selector", "matchLabels").(obj) {
		if labels[k] != v {
			t.Errorf("PodDisruptionBudget selector %s=%v does not select the syncd pods", k, v)
		}
	}
	switch {
	case dig(pdb, "spec", "maxUnavailable") != nil:
		if n := num(t, "PodDisruptionBudget", pdb, "spec", "maxUnavailable"); n < 1 || n >= replicas {
			t.Errorf("PodDisruptionBudget maxUnavailable %d: want 1 to %d, so that a drain proceeds and a replica stays", n, replicas-1)
		}
	case dig(pdb, "spec", "minAvailable") != nil:
		if n := num(t, "PodDisruptionBudget", pdb, "spec", "minAvailable"); n < 1 || n >= replicas {
			t.Errorf("PodDisruptionBudget minAvailable %d: want 1 to %d", n, replicas-1)
		}
	default:
		t.Error("the PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}
}

// TestDeploymentProbes checks the listener, the probes and the scrape
// annotations against the container port.
func TestDeploymentProbes(t *testing.T) {
	ss, p := deployment(t)
	host, portText, err := net.SplitHostPort(p.flags["listen"])
	if err != nil {
		t.Fatalf("--listen %q: %v", p.flags["listen"], err)
	}
	if host != "0.0.0.0" {
		t.Errorf("--listen host %q: probes reach the pod IP, so bind 0.0.0.0", host)
	}
	listen, _ := strconv.Atoi(portText)
	c := p.container
	for probe, want := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		if got := dig(c, probe, "httpGet", "path"); got != want {
			t.Errorf("%s path %v, want %s", probe, got, want)
		}
		if got := p.port(t, dig(c, probe, "httpGet", "port")); got != listen {
			t.Errorf("%s port %d, syncd listens on %d", probe, got, listen)
		}
	}
	ann := dig(ss, "spec", "template", "metadata", "annotations")
	if dig(ann, "prometheus.io/port") != portText || dig(ann, "prometheus.io/path") != "/metrics" {
		t.Errorf("pod annotations %v do not point at :%s/metrics", ann, portText)
	}
	labels := dig(ss, "spec", "template", "metadata", "labels").(obj)
	for k, v := range dig(ss, "spec", "selector", "matchLabels").(obj) {
		if labels[k] != v {
			t.Errorf("selector %s=%v does not match the pod labels %v", k, v, labels)
		}
	}

	svc := find(t, loadDocs(t, k8s+"service.yaml"), "Service", "syncd")
	if dig(svc, "spec", "clusterIP") != "None" || dig(svc, "spec", "publishNotReadyAddresses") != true {
		t.Errorf("Service: want headless (clusterIP: None) with publishNotReadyAddresses, so that every pod is scraped, failing ones too")
	}
	for k, v := range dig(svc, "spec", "selector").(obj) {
		if labels[k] != v {
			t.Errorf("Service selector %s=%v does not select the syncd pods", k, v)
		}
	}
	ports := list(svc, "spec", "ports")
	if len(ports) != 1 || p.port(t, dig(ports[0], "targetPort")) != listen {
		t.Errorf("Service ports %v do not target the listener :%d", ports, listen)
	}
	sa := dig(svc, "metadata", "annotations")
	if dig(sa, "prometheus.io/scrape") != "true" || dig(sa, "prometheus.io/path") != "/metrics" || dig(sa, "prometheus.io/port") != portText {
		t.Errorf("Service annotations %v do not ask Prometheus to scrape :%s/metrics", sa, portText)
	}
}

// TestKustomization checks that kustomization.yaml lists the daemon's
// manifests, never the example Secret, and rewrites the image in use.
func TestKustomization(t *testing.T) {
	k := loadDocs(t, k8s+"kustomization.yaml")[0]
	var res []string
	for _, r := range list(k, "resources") {
		res = append(res, r.(string))
		if _, err := os.Stat(filepath.Join(repoRoot, k8s, r.(string))); err != nil {
			t.Errorf("resource %v: %v", r, err)
		}
	}
	sort.Strings(res)
	if want := []string{"configmap.yaml", "deployment.yaml", "pdb.yaml", "service.yaml"}; !slices.Equal(res, want) {
		t.Errorf("resources %v, want %v (secret.example.yaml and cronjob.yaml are applied on their own)", res, want)
	}
	_, p := deployment(t)
	image := str(t, "image", p.container, "image")
	if name, _, _ := strings.Cut(image, ":"); dig(k, "images", 0, "name") != name {
		t.Errorf("images[0].name %v does not match the Deployment image %s", dig(k, "images", 0, "name"), image)
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed: the rendering check needs `kubectl kustomize`")
	}
	out, err := exec.Command(kubectl, "kustomize", filepath.Join(repoRoot, k8s)).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, out)
	}
	want := "image: " + str(t, "newName", k, "images", 0, "newName") + ":" + str(t, "newTag", k, "images", 0, "newTag")
	if !strings.Contains(string(out), want) {
		t.Errorf("kubectl kustomize output lacks %q", want)
	}
}

// TestBatchVariants checks the CronJob and the coupon campaign Job.
func TestBatchVariants(t *testing.T) {
	docs := loadDocs(t, k8s+"cronjob.yaml")
	maps := sourceMaps(t)
	claims := map[string]string{}

	cj := find(t, docs, "CronJob", "syncd-once")
	if got := dig(cj, "spec", "concurrencyPolicy"); got != "Forbid" {
		t.Errorf("CronJob concurrencyPolicy %v: want Forbid, two runs cannot share one state file", got)
	}
	p := checkPod(t, "CronJob syncd-once", dig(cj, "spec", "jobTemplate", "spec", "template", "spec"), statePVC)
	checkJob(t, p, dig(cj, "spec", "jobTemplate", "spec"))
	if p.flags["once"] != "true" {
		t.Errorf("CronJob args %v: want run --once", p.flags)
	}
	if names := p.load(t, maps, 0); len(names) != 3 {
		t.Errorf("the CronJob runs %v, want the 3 sources of syncd-sources", names)
	}
	claims[claimOf(t, p)] = "CronJob"

	job := find(t, docs, "Job", "syncd-campaign-comeback-2026-10")
	p = checkPod(t, "Job campaign", dig(job, "spec", "template", "spec"), statePVC)
	checkJob(t, p, dig(job, "spec"))
	if p.flags["once"] != "true" || p.flags["source"] != "comeback-2026-10" {
		t.Errorf("campaign Job args %v: want run --once --source comeback-2026-10", p.flags)
	}
	if names := p.load(t, maps, 0); !slices.Contains(names, p.flags["source"]) {
		t.Errorf("--source %s is not among the mounted sources %v", p.flags["source"], names)
	}
	if prev, ok := claims[claimOf(t, p)]; ok {
		t.Errorf("the campaign Job shares its state PVC with the %s: bbolt lets one process open it", prev)
	}
	for claim := range claims {
		find(t, docs, "PersistentVolumeClaim", claim)
	}
}

func checkJob(t *testing.T, p pod, spec any) {
	t.Helper()
	if num(t, p.what, spec, "backoffLimit") < 1 {
		t.Errorf("%s: backoffLimit < 1; a retried run is safe and should happen", p.what)
	}
	if got := dig(p.spec, "restartPolicy"); got != "Never" {
		t.Errorf("%s: restartPolicy %v, podFailurePolicy needs Never", p.what, got)
	}
	rule := dig(spec, "podFailurePolicy", "rules", 0)
	if dig(rule, "action") != "FailJob" || dig(rule, "onExitCodes", "values", 0) != 2 || dig(rule, "onExitCodes", "containerName") != "syncd" {
		t.Errorf("%s: the first podFailurePolicy rule %v should fail the Job on exit 2 (config error: retries cannot fix it)", p.what, rule)
	}
}

func claimOf(t *testing.T, p pod) string {
	t.Helper()
	for _, m := range list(p.container, "volumeMounts") {
		if dig(m, "mountPath") == filepath.Dir(p.flags["state"]) {
			for _, v := range list(p.spec, "volumes") {
				if dig(v, "name") == dig(m, "name") {
					return str(t, p.what, v, "persistentVolumeClaim", "claimName")
				}
			}
		}
	}
	t.Fatalf("%s: no state claim", p.what)
	return ""
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
