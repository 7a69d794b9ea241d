package deploy

import (
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	rulesTestFile       = "deploy/prometheus/syncd-alerts_test.yml"
	prometheusRuleFile  = k8s + "prometheusrule.yaml"
	serviceMonitorFile  = k8s + "servicemonitor.yaml"
	minKubernetesPhrase = "The manifests need Kubernetes 1.26 or later"
)

// Every alert rule has a unit test in syncd-alerts_test.yml in which it
// fires, and `promtool test rules` passes on that file: each alert fires
// when its condition has held for its "for", not before, with the labels
// and annotations written there.
func TestAlertRulesUnitTests(t *testing.T) {
	var tests struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, rulesTestFile)), &tests); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	if !slices.Equal(tests.RuleFiles, []string{filepath.Base(rulesFile)}) {
		t.Errorf("%s tests rule_files %v, want [%s]", rulesTestFile, tests.RuleFiles, filepath.Base(rulesFile))
	}
	fired := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fired[a.Alertname] = true
			}
		}
	}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if !fired[r.Alert] {
				t.Errorf("alert %s has no test in %s in which it fires", r.Alert, rulesTestFile)
			}
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("SKIPPED: promtool is not installed (apt-get install prometheus provides it), so `promtool test rules` did not run; the coverage check above did")
	}
	cmd := exec.Command(promtool, "test", "rules", filepath.Base(rulesTestFile))
	cmd.Dir = filepath.Join(repoRoot, filepath.Dir(rulesTestFile))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", rulesTestFile, err, out)
	}
}

// The PrometheusRule holds exactly the rules of the shipped rules file, and
// the ServiceMonitor scrapes the Service's port at /metrics with the job
// name the rules expect.
func TestPrometheusOperatorManifests(t *testing.T) {
	var file obj
	if err := yaml.Unmarshal([]byte(readFile(t, rulesFile)), &file); err != nil {
		t.Fatal(err)
	}
	pr := find(t, loadDocs(t, prometheusRuleFile), "PrometheusRule", "syncd")
	if v := dig(pr, "apiVersion"); v != "monitoring.coreos.com/v1" {
		t.Errorf("PrometheusRule apiVersion %v, want monitoring.coreos.com/v1", v)
	}
	if !reflect.DeepEqual(dig(pr, "spec", "groups"), dig(file, "groups")) {
		t.Errorf("%s spec.groups differ from the groups of %s: change both together", prometheusRuleFile, rulesFile)
	}
	if len(list(pr, "spec", "groups", 0, "rules")) == 0 {
		t.Errorf("%s has no rules", prometheusRuleFile)
	}

	sm := find(t, loadDocs(t, serviceMonitorFile), "ServiceMonitor", "syncd")
	if v := dig(sm, "apiVersion"); v != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion %v, want monitoring.coreos.com/v1", v)
	}
	svc := find(t, loadDocs(t, k8s+"service.yaml"), "Service", "syncd")
	// The Operator names the job after the Service: the rules select job="syncd".
	if !strings.Contains(readFile(t, rulesFile), `job="`+str(t, "Service name", svc, "metadata", "name")+`"`) {
		t.Errorf("the rules do not select job=%q, the job the ServiceMonitor's Service gives", dig(svc, "metadata", "name"))
	}
	svcLabels, _ := dig(svc, "metadata", "labels").(obj)
	sel, _ := dig(sm, "spec", "selector", "matchLabels").(obj)
	if len(sel) == 0 {
		t.Fatal("ServiceMonitor selects no Service (spec.selector.matchLabels is empty)")
	}
	for k, v := range sel {
		if svcLabels[k] != v {
			t.Errorf("ServiceMonitor selector %s=%v does not match the Service's labels %v", k, v, svcLabels)
		}
	}
	eps := list(sm, "spec", "endpoints")
	if len(eps) != 1 {
		t.Fatalf("ServiceMonitor endpoints %v, want one", eps)
	}
	if dig(eps[0], "port") != dig(svc, "spec", "ports", 0, "name") || dig(eps[0], "path") != "/metrics" {
		t.Errorf("ServiceMonitor endpoint %v, want port %v path /metrics", eps[0], dig(svc, "spec", "ports", 0, "name"))
	}
	// Not in the kustomization (TestKustomization): clusters without the
	// Operator's CRDs could not apply it; the docs say to apply them alone.
	deploy := readFile(t, "docs/DEPLOY.md")
	for _, f := range []string{"servicemonitor.yaml", "prometheusrule.yaml"} {
		if !strings.Contains(deploy, f) {
			t.Errorf("docs/DEPLOY.md does not mention %s", f)
		}
	}
}

// minVersions is the Kubernetes version each API or field the manifests
// use needs (by default, without feature gates).
var minVersions = []struct {
	what    string
	version int // minor version of 1.x
	uses    func(file, text string, doc obj) bool
}{
	{"apps/v1 Deployment", 9, func(_, _ string, d obj) bool { return d["apiVersion"] == "apps/v1" }},
	{"policy/v1 PodDisruptionBudget", 21, func(_, _ string, d obj) bool { return d["apiVersion"] == "policy/v1" }},
	{"batch/v1 CronJob", 21, func(_, _ string, d obj) bool { return d["apiVersion"] == "batch/v1" && d["kind"] == "CronJob" }},
	{"fsGroupChangePolicy", 23, func(_, text string, _ obj) bool { return strings.Contains(text, "fsGroupChangePolicy:") }},
	{"Job podFailurePolicy and the DisruptionTarget condition", 26, func(_, text string, _ obj) bool { return strings.Contains(text, "podFailurePolicy:") }},
	{"the pod label apps.kubernetes.io/pod-index", 28, func(_, text string, _ obj) bool {
		return strings.Contains(text, "apps.kubernetes.io/pod-index")
	}},
}

// docs/DEPLOY.md states the minimum Kubernetes version the manifests need,
// and it is the highest version an API or field they use needs.
func TestKubernetesMinimumVersion(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, k8s, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	need, why := 0, ""
	for _, f := range files {
		rel, _ := filepath.Rel(repoRoot, f)
		text := readFile(t, rel)
		for _, d := range loadDocs(t, rel) {
			for _, m := range minVersions {
				if m.uses(rel, text, d) && m.version > need {
					need, why = m.version, m.what+" ("+rel+")"
				}
			}
		}
	}
	want := minKubernetesPhrase
	if got := "1." + strconv.Itoa(need); !strings.HasSuffix(want, "Kubernetes "+got+" or later") {
		t.Fatalf("the manifests need Kubernetes %s for %s; update minKubernetesPhrase and docs/DEPLOY.md", got, why)
	}
	if !strings.Contains(strings.Join(strings.Fields(readFile(t, "docs/DEPLOY.md")), " "), want) {
		t.Errorf("docs/DEPLOY.md does not say %q", want)
	}
}
