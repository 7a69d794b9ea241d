package deploy

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/syncd/syncd/metrics"
)

const (
	dashboardFile = "deploy/grafana/syncd.json"
	rulesFile     = "deploy/prometheus/syncd-alerts.yml"
)

type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadRules(t *testing.T) alertRules {
	t.Helper()
	var r alertRules
	dec := yaml.NewDecoder(strings.NewReader(readFile(t, rulesFile)))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return r
}

type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(readFile(t, dashboardFile)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// The alert rules parse, each names a severity and a summary, and together
// they cover what an operator must be woken for: a stopped daemon, a copy
// that is not fresh, failing runs, divergence found by reconcile and a
// read bound held back. promtool checks them when it is installed.
func TestAlertRules(t *testing.T) {
	r := loadRules(t)
	var exprs []string
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" || rule.Expr == "" || rule.Labels["severity"] == "" || rule.Annotations["summary"] == "" {
				t.Errorf("rule %q (group %s) lacks an alert name, an expr, a severity or a summary", rule.Alert, g.Name)
			}
			if rule.For != "" {
				if _, err := time.ParseDuration(rule.For); err != nil {
					t.Errorf("rule %s: for %q: %v", rule.Alert, rule.For, err)
				}
			}
			exprs = append(exprs, rule.Expr)
		}
	}
	all := strings.Join(exprs, "\n")
	for what, want := range map[string]string{
		"a stopped daemon":        `up{job="syncd"} == 0`,
		"no daemon scraped":       `absent(up{job="syncd"})`,
		"freshness":               "syncd_freshness_seconds",
		"failing runs":            "syncd_source_failed",
		"divergence by reconcile": "syncd_reconcile_differences",
		"a bound held back":       "syncd_read_bound_held_back_seconds",
		"a table a pattern skips": "syncd_pattern_table_skipped",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no alert rule for %s (%s)", what, want)
		}
	}

	t.Run("promtool", func(t *testing.T) {
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			t.Skip("SKIPPED: promtool is not installed (apt-get install prometheus provides it), so `promtool check rules` did not run; the YAML checks above did")
		}
		out, err := exec.Command(promtool, "check", "rules", filepath.Join(repoRoot, rulesFile)).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool check rules: %v\n%s", err, out)
		}
	})
}

// The dashboard decodes, every panel queries something, and it shows
// freshness, failing runs, divergence, the bound and whether daemons are up.
func TestGrafanaDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: title %q, uid %q, %d panels", dashboardFile, d.Title, d.UID, len(d.Panels))
	}
	var all []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
			all = append(all, tg.Expr)
		}
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{"syncd_freshness_seconds", "syncd_source_failed", "syncd_reconcile_differences", "syncd_read_bound_held_back_seconds", "up{", "syncd_runs_total"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no panel queries %s", want)
		}
	}
}

// Every metric the dashboard and the alert rules use is one the daemon
// exports (or Prometheus's own up): a renamed series cannot leave a panel
// empty or an alert silent.
func TestDashboardAndAlertMetricsExist(t *testing.T) {
	have := exportedNames(t)
	used := map[string][]string{}
	r := loadRules(t)
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			for _, n := range metricNames(rule.Expr) {
				used[n] = append(used[n], rulesFile+" "+rule.Alert)
			}
		}
	}
	d := loadDashboard(t)
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, n := range metricNames(tg.Expr) {
				used[n] = append(used[n], dashboardFile+" "+p.Title)
			}
		}
	}
	for _, v := range d.Templating.List {
		for _, n := range metricNames(v.Definition) {
			used[n] = append(used[n], dashboardFile+" variable "+v.Name)
		}
	}
	if len(used) < 5 {
		t.Fatalf("found only %v in the files: the name extraction is broken", used)
	}
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if n != "up" && !have[n] {
			t.Errorf("%s is used by %v but the daemon does not export it", n, used[n])
		}
	}
}

var (
	// identRE finds names in PromQL: a series name is an identifier not
	// followed by "(" (a function) and not inside a label matcher or string.
	identRE   = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	stringsRE = regexp.MustCompile(`"[^"]*"|\{[^}]*\}|\[[^\]]*\]`)
	promqlKw  = map[string]bool{
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"and": true, "or": true, "unless": true, "bool": true, "offset": true, "le": true,
	}
)

// metricNames lists the series names a PromQL expression selects.
func metricNames(expr string) []string {
	// Keep the name before a label matcher, drop the matcher, ranges and
	// strings themselves.
	e := stringsRE.ReplaceAllString(expr, " ")
	var out []string
	for _, loc := range identRE.FindAllStringIndex(e, -1) {
		name := e[loc[0]:loc[1]]
		rest := strings.TrimLeft(e[loc[1]:], " ")
		if strings.HasPrefix(rest, "(") || promqlKw[name] || strings.HasPrefix(name, "$") {
			continue
		}
		if loc[0] > 0 && e[loc[0]-1] == '$' {
			continue // a Grafana variable such as $__rate_interval
		}
		// Label names (in by (...) lists) are not series: only syncd_
		// series and up are checked.
		if name == "up" || strings.HasPrefix(name, "syncd_") {
			out = append(out, name)
		}
	}
	return out
}

// exportedNames is every series name a daemon's /metrics shows once each
// kind of event has happened: the daemon's registry (package metrics plus
// the Go and process collectors) with each recording method called.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg, "test")
	m.AddSource("s", metrics.Totals{})
	m.Page("s", 10, 5, 1, time.Now())
	m.CaughtUp("s", time.Now())
	m.RunDone("s", metrics.OutcomeOK, time.Second)
	m.Error("s", "connection")
	m.Retry("s")
	m.SkippedTick("s")
	m.ReconcileDone("s", metrics.OutcomeOK, time.Second)
	m.SetReconcileDifferences("s", "missing", 1)
	m.ReconcileRows("s", 1, 1)
	m.ReconcileClean("s", time.Now())
	m.Bound("s", time.Now(), time.Second, 1)
	m.Campaign("s", 1, 1, 0, 0)
	m.CursorIndexMissing("s", true)
	m.PatternSkipped("p", map[string]string{"public.events": "no_cursor_column"})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				have[mf.GetName()+s] = true
			}
		}
	}
	return have
}
