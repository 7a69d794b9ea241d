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

func statefulSet(t *testing.T) (obj, pod) {
	t.Helper()
	ss := find(t, loadDocs(t, k8s+"statefulset.yaml"), "StatefulSet", "syncd")
	var claims []string
	for _, c := range list(ss, "spec", "volumeClaimTemplates") {
		claims = append(claims, str(t, "volumeClaimTemplates", c, "metadata", "name"))
		if dig(c, "spec", "resources", "requests", "storage") == nil {
			t.Errorf("volumeClaimTemplate %v requests no storage", claims)
		}
	}
	return ss, checkPod(t, "StatefulSet syncd", dig(ss, "spec", "template", "spec"), claims)
}

// TestStatefulSetShards loads each replica's sources with the real loader and
// checks that every source file runs in exactly one shard.
func TestStatefulSetShards(t *testing.T) {
	ss, p := statefulSet(t)
	if p.flags["once"] != "" {
		t.Fatalf("the StatefulSet runs the daemon; drop --once")
	}
	if e := p.env["POD_INDEX"]; e.Field != "metadata.labels['apps.kubernetes.io/pod-index']" {
		t.Fatalf("POD_INDEX comes from %+v, want the pod-index label", e)
	}
	if !strings.Contains(p.flags["config"], "$(POD_INDEX)") {
		t.Fatalf("--config %s does not depend on the pod index: every replica would run every source", p.flags["config"])
	}
	replicas := num(t, "StatefulSet", ss, "spec", "replicas")
	maps := sourceMaps(t)
	seen := map[string]int{}
	for i := range replicas {
		names := p.load(t, maps, i)
		if len(names) == 0 {
			t.Errorf("shard %d has no sources", i)
		}
		t.Logf("syncd-%d runs %v", i, names)
		for _, n := range names {
			if prev, ok := seen[n]; ok {
				t.Errorf("source %s runs in shards %d and %d", n, prev, i)
			}
			seen[n] = i
		}
	}
	files, _ := p.sources(t, maps, 0)
	if _, dir := p.sources(t, maps, replicas); slices.ContainsFunc(mapKeys(files), func(f string) bool { return filepath.Dir(f) == dir }) {
		t.Errorf("files are mapped to shard %d, but replicas is %d: they never run", replicas, replicas)
	}
	keys := mapKeys(dig(find(t, maps, "ConfigMap", p.configMap), "data").(obj))
	mapped := map[string]int{}
	for _, it := range p.items {
		mapped[str(t, "items", it, "key")]++
	}
	for _, k := range keys {
		if mapped[k] != 1 {
			t.Errorf("ConfigMap key %s is mapped to %d shards, want exactly 1", k, mapped[k])
		}
	}
	if len(seen) != len(keys) {
		t.Errorf("%d sources run, the ConfigMap has %d files", len(seen), len(keys))
	}
}

// TestStatefulSetProbes checks the listener, the probes and the scrape
// annotations against the container port.
func TestStatefulSetProbes(t *testing.T) {
	ss, p := statefulSet(t)
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

	svc := find(t, loadDocs(t, k8s+"service.yaml"), "Service", str(t, "serviceName", ss, "spec", "serviceName"))
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
	if want := []string{"configmap.yaml", "service.yaml", "statefulset.yaml"}; !slices.Equal(res, want) {
		t.Errorf("resources %v, want %v (secret.example.yaml and cronjob.yaml are applied on their own)", res, want)
	}
	_, p := statefulSet(t)
	image := str(t, "image", p.container, "image")
	if name, _, _ := strings.Cut(image, ":"); dig(k, "images", 0, "name") != name {
		t.Errorf("images[0].name %v does not match the StatefulSet image %s", dig(k, "images", 0, "name"), image)
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
	p := checkPod(t, "CronJob syncd-once", dig(cj, "spec", "jobTemplate", "spec", "template", "spec"), nil)
	checkJob(t, p, dig(cj, "spec", "jobTemplate", "spec"))
	if p.flags["once"] != "true" {
		t.Errorf("CronJob args %v: want run --once", p.flags)
	}
	if names := p.load(t, maps, 0); len(names) != 3 {
		t.Errorf("the CronJob runs %v, want the 3 sources of syncd-sources", names)
	}
	claims[claimOf(t, p)] = "CronJob"

	job := find(t, docs, "Job", "syncd-campaign-comeback-2026-10")
	p = checkPod(t, "Job campaign", dig(job, "spec", "template", "spec"), nil)
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
