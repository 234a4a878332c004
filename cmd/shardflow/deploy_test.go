package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/shardflow/shardflow/health"
)

// The manifests of deploy/kubernetes, decoded into the fields this test
// checks (yaml.v3 ignores the others).
type (
	manifest struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Metadata   metadata `yaml:"metadata"`
		Spec       spec     `yaml:"spec"`
		Resources  []string `yaml:"resources"` // a Kustomization's
	}
	metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	}
	spec struct {
		Replicas       int        `yaml:"replicas"`
		Selector       selector   `yaml:"selector"`
		Template       podTmpl    `yaml:"template"`
		MaxUnavailable *int       `yaml:"maxUnavailable"` // PodDisruptionBudget
		MinAvailable   *int       `yaml:"minAvailable"`
		Ports          []svcPort  `yaml:"ports"` // Service
		Endpoints      []endpoint `yaml:"endpoints"`
		Strategy       struct {
			RollingUpdate struct {
				MaxUnavailable int `yaml:"maxUnavailable"`
			} `yaml:"rollingUpdate"`
		} `yaml:"strategy"`
	}
	selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	podTmpl struct {
		Metadata metadata `yaml:"metadata"`
		Spec     podSpec  `yaml:"spec"`
	}
	podSpec struct {
		TerminationGracePeriodSeconds *int        `yaml:"terminationGracePeriodSeconds"`
		Containers                    []container `yaml:"containers"`
	}
	container struct {
		Name  string   `yaml:"name"`
		Image string   `yaml:"image"`
		Args  []string `yaml:"args"`
		Env   []struct {
			Name      string `yaml:"name"`
			ValueFrom *struct {
				FieldRef struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		LivenessProbe  *probe `yaml:"livenessProbe"`
		ReadinessProbe *probe `yaml:"readinessProbe"`
		StartupProbe   *probe `yaml:"startupProbe"`
		Lifecycle      struct {
			PreStop *struct {
				Sleep *struct {
					Seconds int `yaml:"seconds"`
				} `yaml:"sleep"`
			} `yaml:"preStop"`
		} `yaml:"lifecycle"`
	}
	probe struct {
		HTTPGet *struct {
			Path string    `yaml:"path"`
			Port yaml.Node `yaml:"port"` // a name or a number
		} `yaml:"httpGet"`
	}
	svcPort struct {
		Name       string    `yaml:"name"`
		Port       int       `yaml:"port"`
		TargetPort yaml.Node `yaml:"targetPort"`
	}
	endpoint struct {
		Port string `yaml:"port"`
		Path string `yaml:"path"`
	}
)

// readManifests decodes every document of every YAML file under dir.
func readManifests(t *testing.T, dir string) map[string][]manifest {
	t.Helper()
	out := map[string][]manifest{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(false)
		for {
			var m manifest
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if m.APIVersion == "" || m.Kind == "" {
				t.Fatalf("%s: a document without apiVersion or kind", path)
			}
			if m.Kind != "Kustomization" && m.Metadata.Name == "" {
				t.Fatalf("%s: %s without metadata.name", path, m.Kind)
			}
			out[m.Kind] = append(out[m.Kind], m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// flagValue returns --name's value in args (--name=value form).
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestKubernetesManifests: deploy/kubernetes parses; the Deployment runs
// `serve` with flags serve accepts, its probes ask the health package's
// paths on the port --http listens on, its stop budget fits its
// terminationGracePeriodSeconds; the PodDisruptionBudget, Service and
// ServiceMonitor select the workers and scrape /metrics on that port; the
// kustomization lists every file; the stored-job examples are flags `job
// add` accepts.
func TestKubernetesManifests(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "kubernetes")
	got := readManifests(t, dir)
	for _, kind := range []string{"Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor", "Kustomization", "Job"} {
		if len(got[kind]) != 1 {
			t.Fatalf("want one %s in %s, got %d", kind, dir, len(got[kind]))
		}
	}
	dep := got["Deployment"][0]
	labels := dep.Spec.Template.Metadata.Labels
	for k, v := range dep.Spec.Selector.MatchLabels {
		if labels[k] != v {
			t.Fatalf("Deployment selector %s=%s does not match its pod labels %v", k, v, labels)
		}
	}
	if dep.Spec.Replicas < 2 || dep.Spec.Strategy.RollingUpdate.MaxUnavailable != 0 {
		t.Errorf("Deployment: replicas %d, maxUnavailable %d; want >= 2 and 0 (a replacement joins before a pod leaves)", dep.Spec.Replicas, dep.Spec.Strategy.RollingUpdate.MaxUnavailable)
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("Deployment: %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("Deployment args %q, want serve ...", c.Args)
	}
	// serve accepts every flag: with -h last, parsing reaches the help
	// request only if no flag before it is unknown or malformed.
	_, errOut, code := runCLI(t, append(append([]string(nil), c.Args...), "-h")...)
	if code != 0 || strings.Contains(errOut, "not defined") || strings.Contains(errOut, "invalid") || !strings.Contains(errOut, "-stop-grace") {
		t.Fatalf("serve rejects the Deployment's args %q: exit %d\n%s", c.Args, code, errOut)
	}
	if id, _ := flagValue(c.Args, "server-id"); id != "$(POD_NAME)" {
		t.Errorf("--server-id %q, want $(POD_NAME) (one id per pod)", id)
	}
	podName := false
	for _, e := range c.Env {
		podName = podName || (e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name")
	}
	if !podName {
		t.Error("no POD_NAME from fieldRef metadata.name for --server-id")
	}

	// Probes: the health package's paths, on the port --http listens on.
	httpAddr, ok := flagValue(c.Args, "http")
	if !ok {
		t.Fatal("Deployment: serve without --http: no probes to answer")
	}
	_, portText, _ := strings.Cut(httpAddr, ":")
	listen, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatalf("--http %q: %v", httpAddr, err)
	}
	namedPorts := map[string]int{}
	for _, p := range c.Ports {
		namedPorts[p.Name] = p.ContainerPort
	}
	resolve := func(n yaml.Node) int {
		if p, err := strconv.Atoi(n.Value); err == nil {
			return p
		}
		return namedPorts[n.Value]
	}
	for _, p := range []struct {
		name  string
		probe *probe
		path  string
	}{
		{"livenessProbe", c.LivenessProbe, health.LivenessPath},
		{"readinessProbe", c.ReadinessProbe, health.ReadinessPath},
		{"startupProbe", c.StartupProbe, health.ReadinessPath},
	} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: missing, or not an httpGet", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path || resolve(p.probe.HTTPGet.Port) != listen {
			t.Errorf("%s: GET %s on port %q (%d), want %s on %d (--http %s)", p.name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.Value, resolve(p.probe.HTTPGet.Port), p.path, listen, httpAddr)
		}
	}

	// The stop budget: preStop, then --stop-grace for runs, then the
	// leave (bounded by the Node's detach timeout, 10 s), inside the
	// grace period, or the kubelet's SIGKILL turns a drain into a crash.
	if pod.TerminationGracePeriodSeconds == nil {
		t.Fatal("Deployment: no terminationGracePeriodSeconds")
	}
	if c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatal("Deployment: no preStop sleep")
	}
	graceText, _ := flagValue(c.Args, "stop-grace")
	grace, err := time.ParseDuration(graceText)
	if err != nil {
		t.Fatalf("--stop-grace %q: %v", graceText, err)
	}
	budget := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second + grace + 10*time.Second
	if limit := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second; budget > limit {
		t.Errorf("preStop %ds + --stop-grace %s + leave 10s = %s exceeds terminationGracePeriodSeconds %s", c.Lifecycle.PreStop.Sleep.Seconds, grace, budget, limit)
	}

	// The PodDisruptionBudget and Service select the workers; the
	// ServiceMonitor scrapes /metrics on the Service port that targets
	// --http's.
	pdb := got["PodDisruptionBudget"][0]
	if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
		t.Error("PodDisruptionBudget: neither maxUnavailable nor minAvailable")
	}
	svc, sm := got["Service"][0], got["ServiceMonitor"][0]
	for what, sel := range map[string]map[string]string{"PodDisruptionBudget": pdb.Spec.Selector.MatchLabels, "Service": svcSelector(t, dir)} {
		if len(sel) == 0 {
			t.Errorf("%s selects nothing", what)
		}
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s selector %s=%s does not match the pods' labels %v", what, k, v, labels)
			}
		}
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Metadata.Labels[k] != v {
			t.Errorf("ServiceMonitor selector %s=%s does not match the Service's labels %v", k, v, svc.Metadata.Labels)
		}
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Path != health.MetricsPath {
		t.Fatalf("ServiceMonitor endpoints %+v, want one on %s", sm.Spec.Endpoints, health.MetricsPath)
	}
	scraped := false
	for _, p := range svc.Spec.Ports {
		scraped = scraped || (p.Name == sm.Spec.Endpoints[0].Port && resolve(p.TargetPort) == listen)
	}
	if !scraped {
		t.Errorf("ServiceMonitor port %q is not a Service port targeting %d", sm.Spec.Endpoints[0].Port, listen)
	}

	// The kustomization names every top-level manifest.
	entries, _ := os.ReadDir(dir)
	kust := strings.Join(got["Kustomization"][0].Resources, " ")
	for _, e := range entries {
		if !e.IsDir() && e.Name() != "kustomization.yaml" && !strings.Contains(kust, e.Name()) {
			t.Errorf("kustomization.yaml does not list %s", e.Name())
		}
	}

	// The stored-job examples: `job add` with flags it accepts.
	for _, c := range got["Job"][0].Spec.Template.Spec.Containers {
		if len(c.Args) < 2 || c.Args[0] != "job" || c.Args[1] != "add" {
			t.Fatalf("store-jobs container %s: args %q, want job add ...", c.Name, c.Args)
		}
		_, errOut, code := runCLI(t, append(append([]string(nil), c.Args...), "-h")...)
		if code != 0 || strings.Contains(errOut, "not defined") || strings.Contains(errOut, "invalid") {
			t.Fatalf("job add rejects %s's args %q: exit %d\n%s", c.Name, c.Args, code, errOut)
		}
	}
}

// svcSelector reads the Service's spec.selector (a plain map, unlike the
// others' matchLabels).
func svcSelector(t *testing.T, dir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "service.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var svc struct {
		Spec struct {
			Selector map[string]string `yaml:"selector"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &svc); err != nil {
		t.Fatal(err)
	}
	return svc.Spec.Selector
}
