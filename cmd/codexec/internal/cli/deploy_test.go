package cli

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/codexec/codexec/worker/sandbox"
)

// The checks CI can make of deploy/ without Docker or a cluster: every
// Kubernetes manifest decodes into Kubernetes' own API types with unknown
// fields refused, and what it runs is real; the compose file names real
// services, volumes and flags; the container image builds and runs the
// commands the READMEs document.

// deployDir is the repository's deploy/ directory.
func deployDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../../../deploy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil {
		t.Fatalf("deploy/ not found at %s: %v", dir, err)
	}
	return dir
}

// awaitedFlags are flags the manifests use that this command line may not
// have yet (the listener of metrics and health probes): while the flag set
// lacks one, it is accepted; once the flag set has it, it is checked like
// any other.
var awaitedFlags = map[string]string{}

// commandSet is one command's flags and their environment variables.
type commandSet struct {
	flags map[string]flagDoc
	env   map[string]bool
}

var commandSets = map[string]commandSet{}

// flagsOf returns command cmd's flags as its -h output lists them.
func flagsOf(t *testing.T, cmd string) commandSet {
	t.Helper()
	if s, ok := commandSets[cmd]; ok {
		return s
	}
	docs, err := commandFlags(context.Background(), cmd)
	if err != nil {
		t.Fatalf("codexec %s -h: %v", cmd, err)
	}
	s := commandSet{flags: map[string]flagDoc{}, env: map[string]bool{}}
	for _, d := range docs {
		s.flags[d.Name] = d
		if d.Env != "" {
			s.env[d.Env] = true
		}
	}
	commandSets[cmd] = s
	return s
}

// knownCommands are the subcommands a deployment may run.
var knownCommands = []string{"dev", "frontend", "worker", "status", "export", "token", "version", "help"}

// checkArgs checks that args is a codexec command line: a known command
// and flags it has (with a value where the flag takes one). It returns the
// command and the flags' values.
func checkArgs(t *testing.T, where string, args []string) (string, map[string]string) {
	t.Helper()
	if len(args) == 0 || !slices.Contains(knownCommands, args[0]) {
		t.Errorf("%s: %q is not a codexec command", where, args)
		return "", nil
	}
	cmd, values := args[0], map[string]string{}
	if cmd == "version" || cmd == "help" {
		return cmd, values
	}
	set := flagsOf(t, cmd)
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			t.Errorf("%s: %q: stray argument %q", where, args, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		d, ok := set.flags[name]
		if !ok {
			if _, awaited := awaitedFlags[name]; !awaited {
				t.Errorf("%s: codexec %s has no flag --%s", where, cmd, name)
				continue
			}
			d = flagDoc{Name: name, Type: "string"}
		}
		if d.Type != "" && !hasValue {
			if i+1 >= len(args) {
				t.Errorf("%s: --%s needs a value", where, name)
				continue
			}
			i++
			value = args[i]
		}
		values[name] = value
	}
	return cmd, values
}

// checkEnv checks that every CODEXEC_ variable is one of cmd's.
func checkEnv(t *testing.T, where, cmd string, names []string) {
	t.Helper()
	set := flagsOf(t, cmd)
	for _, n := range names {
		if !strings.HasPrefix(n, "CODEXEC_") {
			continue
		}
		if !set.env[n] && !slices.Contains(slices.Collect(mapValues(awaitedFlags)), n) {
			t.Errorf("%s: codexec %s reads no variable %s", where, cmd, n)
		}
	}
}

func mapValues(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// kustomization is the part of a Kustomization the manifests use; it is
// decoded strictly, so anything else in the file fails the test until it is
// added here.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// manifestScheme knows the kinds the manifests may hold.
func manifestScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, autoscalingv2.AddToScheme, policyv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// splitDocuments splits a YAML stream at its "---" lines, leaving out
// documents of comments only.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if hasContent(cur.Bytes()) {
			docs = append(docs, append([]byte(nil), cur.Bytes()...))
		}
		cur.Reset()
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if strings.TrimRight(sc.Text(), " ") == "---" {
			flush()
			continue
		}
		cur.Write(sc.Bytes())
		cur.WriteByte('\n')
	}
	flush()
	return docs
}

func hasContent(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return true
		}
	}
	return false
}

// manifests decodes every document of the kustomization's resources
// strictly (Kubernetes' strict serializer: unknown or duplicate fields are
// errors) into the API types.
func manifests(t *testing.T) (kustomization, []runtime.Object) {
	t.Helper()
	dir := filepath.Join(deployDir(t), "kubernetes")
	var k kustomization
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" || len(k.Resources) == 0 {
		t.Fatalf("kustomization.yaml: %+v", k)
	}
	scheme := manifestScheme(t)
	ser := k8sjson.NewSerializerWithOptions(k8sjson.DefaultMetaFactory, scheme, scheme, k8sjson.SerializerOptions{Yaml: true, Strict: true})
	var objs []runtime.Object
	for _, res := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, res))
		if err != nil {
			t.Fatalf("kustomization.yaml names %s: %v", res, err)
		}
		for i, doc := range splitDocuments(data) {
			obj, gvk, err := ser.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s, document %d: %v", res, i+1, err)
				continue
			}
			if gvk.Kind != "Namespace" && k.Namespace == "" {
				t.Errorf("%s: %s without a namespace from the kustomization", res, gvk.Kind)
			}
			objs = append(objs, obj)
		}
	}
	// Every other YAML file of the directory is a chart's values file.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".yaml") || name == "kustomization.yaml" || slices.Contains(k.Resources, name) {
			continue
		}
		if !strings.HasSuffix(name, "-values.yaml") {
			t.Errorf("%s is neither in kustomization.yaml nor a chart's values file (*-values.yaml)", name)
			continue
		}
		var values map[string]any
		data, _ := os.ReadFile(filepath.Join(dir, name))
		if err := yaml.Unmarshal(data, &values); err != nil || len(values) == 0 {
			t.Errorf("%s: not a YAML map of values: %v", name, err)
		}
	}
	return k, objs
}

// The strict decoding refuses what it should: a misspelt field of a
// container, and a kind it does not know.
func TestManifestDecodingIsStrict(t *testing.T) {
	scheme := manifestScheme(t)
	ser := k8sjson.NewSerializerWithOptions(k8sjson.DefaultMetaFactory, scheme, scheme, k8sjson.SerializerOptions{Yaml: true, Strict: true})
	for name, doc := range map[string]string{
		"unknown field":  "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n    - name: c\n      image: i\n      imagePolicy: Always\n",
		"field's case":   "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n    - name: c\n      Image: i\n",
		"duplicate":      "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {clusterIP: None}\nspec: {}\n",
		"unknown kind":   "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n",
		"wrong API type": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: two}\n",
	} {
		if _, _, err := ser.Decode([]byte(doc), nil, nil); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}

// Every manifest decodes strictly; the workloads run codexec commands with
// real flags and variables, probe /healthz and /readyz on ports they open,
// and their Services, autoscalers and budgets point at what exists.
func TestKubernetesManifests(t *testing.T) {
	k, objs := manifests(t)
	if len(k.Images) != 1 || k.Images[0].Name != "codexec" {
		t.Errorf("kustomization images = %+v, want the one codexec image to set", k.Images)
	}
	kinds := map[string][]string{}
	var templates []corev1.PodTemplateSpec
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			kinds["Deployment"] = append(kinds["Deployment"], o.Name)
			checkSelector(t, o.Name, o.Spec.Selector.MatchLabels, o.Spec.Template.Labels)
			checkPod(t, o.Name, o.Spec.Template.Spec, nil)
			templates = append(templates, o.Spec.Template)
		case *appsv1.StatefulSet:
			kinds["StatefulSet"] = append(kinds["StatefulSet"], o.Name)
			checkSelector(t, o.Name, o.Spec.Selector.MatchLabels, o.Spec.Template.Labels)
			var claims []string
			for _, c := range o.Spec.VolumeClaimTemplates {
				claims = append(claims, c.Name)
			}
			checkPod(t, o.Name, o.Spec.Template.Spec, claims)
			templates = append(templates, o.Spec.Template)
			defer func(name, svc string) {
				if !slices.Contains(kinds["Service"], svc) {
					t.Errorf("StatefulSet %s: serviceName %q is no Service of the manifests", name, svc)
				}
			}(o.Name, o.Spec.ServiceName)
		case *corev1.Service:
			kinds["Service"] = append(kinds["Service"], o.Name)
		case *autoscalingv2.HorizontalPodAutoscaler, *policyv1.PodDisruptionBudget, *corev1.Namespace:
		default:
			t.Errorf("unexpected object %T", o)
		}
	}
	for _, want := range []string{"Deployment", "StatefulSet", "Service"} {
		if len(kinds[want]) == 0 {
			t.Errorf("no %s in the manifests", want)
		}
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			checkService(t, o, templates)
		case *autoscalingv2.HorizontalPodAutoscaler:
			ref := o.Spec.ScaleTargetRef
			if ref.APIVersion != "apps/v1" || !slices.Contains(kinds[ref.Kind], ref.Name) {
				t.Errorf("HorizontalPodAutoscaler %s scales %+v, which the manifests do not define", o.Name, ref)
			}
			if len(o.Spec.Metrics) == 0 {
				t.Errorf("HorizontalPodAutoscaler %s has no metric", o.Name)
			}
		case *policyv1.PodDisruptionBudget:
			if !selectsAny(o.Spec.Selector.MatchLabels, templates) {
				t.Errorf("PodDisruptionBudget %s selects no pod of the manifests", o.Name)
			}
		}
	}
}

func checkSelector(t *testing.T, name string, selector, labels map[string]string) {
	t.Helper()
	if len(selector) == 0 || !subset(selector, labels) {
		t.Errorf("%s: selector %v does not match its pods' labels %v", name, selector, labels)
	}
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func selectsAny(sel map[string]string, templates []corev1.PodTemplateSpec) bool {
	for _, tpl := range templates {
		if len(sel) > 0 && subset(sel, tpl.Labels) {
			return true
		}
	}
	return false
}

// checkService checks that s selects pods of the manifests and that its
// target ports are ports those pods open.
func checkService(t *testing.T, s *corev1.Service, templates []corev1.PodTemplateSpec) {
	t.Helper()
	for _, tpl := range templates {
		if len(s.Spec.Selector) == 0 || !subset(s.Spec.Selector, tpl.Labels) {
			continue
		}
		for _, p := range s.Spec.Ports {
			if _, ok := containerPort(tpl.Spec.Containers, p.TargetPort); !ok {
				t.Errorf("Service %s: target port %s is no port of its pods", s.Name, p.TargetPort.String())
			}
		}
		return
	}
	t.Errorf("Service %s selects no pod of the manifests", s.Name)
}

// containerPort resolves a port by name or number among the containers'.
func containerPort(cs []corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, c := range cs {
		for _, cp := range c.Ports {
			if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

// checkPod checks a workload's pod: codexec command lines and variables,
// probes, mounts; and for a worker, what its sandbox needs.
func checkPod(t *testing.T, name string, pod corev1.PodSpec, claims []string) {
	t.Helper()
	volumes := slices.Clone(claims)
	for _, v := range pod.Volumes {
		volumes = append(volumes, v.Name)
	}
	for _, c := range pod.Containers {
		where := name + "/" + c.Name
		if c.Image != "codexec" {
			t.Errorf("%s: image %q, want codexec (set by the kustomization's images)", where, c.Image)
		}
		cmd, values := checkArgs(t, where, c.Args)
		var env []string
		for _, e := range c.Env {
			env = append(env, e.Name)
		}
		checkEnv(t, where, cmd, env)
		for _, m := range c.VolumeMounts {
			if !slices.Contains(volumes, m.Name) {
				t.Errorf("%s: mounts %q, which the pod does not have", where, m.Name)
			}
		}
		checkProbes(t, where, c, cmd, values)
		if cmd == "worker" {
			checkWorkerPod(t, where, pod, c, values)
		}
	}
}

// listenPort is the port of a listen address such as ":9464".
func listenPort(addr string) int32 {
	_, port, _ := strings.Cut(addr, ":")
	n, _ := strconv.Atoi(port)
	return int32(n)
}

// checkProbes checks that liveness probes /healthz and readiness /readyz,
// on a port the container opens and codexec listens on: a frontend's
// --http, or any role's --metrics-addr.
func checkProbes(t *testing.T, where string, c corev1.Container, cmd string, values map[string]string) {
	t.Helper()
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Errorf("%s: liveness and readiness probes are both needed", where)
		return
	}
	listening := []int32{listenPort(values["metrics-addr"])}
	if cmd == "frontend" {
		listening = append(listening, listenPort(values["http"]))
	}
	for _, p := range []struct {
		kind, path string
		probe      *corev1.Probe
	}{{"liveness", "/healthz", c.LivenessProbe}, {"readiness", "/readyz", c.ReadinessProbe}, {"startup", "/healthz", c.StartupProbe}} {
		if p.probe == nil {
			continue
		}
		g := p.probe.HTTPGet
		if g == nil || g.Path != p.path {
			t.Errorf("%s: %s probe %+v, want GET %s", where, p.kind, p.probe.ProbeHandler, p.path)
			continue
		}
		port, ok := containerPort([]corev1.Container{c}, g.Port)
		if !ok || !slices.Contains(listening, port) {
			t.Errorf("%s: %s probe on port %s, which is not one codexec %s listens on (%v)", where, p.kind, g.Port.String(), cmd, listening)
		}
	}
}

// checkWorkerPod checks what the sandbox of a worker needs: root and
// privilege (namespaces, writable cgroups, loop devices; worker.yaml says
// why), its data directory on the volume, and the uid register on the
// node, shared by the node's workers.
func checkWorkerPod(t *testing.T, where string, pod corev1.PodSpec, c corev1.Container, values map[string]string) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || !*sc.Privileged || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("%s: a worker needs root in a privileged container, got %+v", where, sc)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	if d := values["data-dir"]; d == "" || mounts[d] == "" {
		t.Errorf("%s: --data-dir %q is not a mounted volume (%v)", where, d, mounts)
	}
	uidDir := orDefault(values["uid-dir"], sandbox.DefaultUIDDir)
	vol := mounts[uidDir]
	i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == vol })
	if i < 0 || pod.Volumes[i].HostPath == nil {
		t.Errorf("%s: the uid register %s must be a directory of the node (hostPath) that its workers share", where, uidDir)
	}
}

func orDefault(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// composeFile is the part of the compose specification the compose file
// uses, decoded strictly.
type composeFile struct {
	Name     string                    `json:"name"`
	Services map[string]composeService `json:"services"`
	Volumes  map[string]struct{}       `json:"volumes"`
}

type composeService struct {
	Image string `json:"image"`
	Build *struct {
		Context    string `json:"context"`
		Dockerfile string `json:"dockerfile"`
	} `json:"build"`
	Command         []string `json:"command"`
	Ports           []string `json:"ports"`
	Volumes         []string `json:"volumes"`
	DependsOn       []string `json:"depends_on"`
	Privileged      bool     `json:"privileged"`
	Cgroup          string   `json:"cgroup"`
	StopGracePeriod string   `json:"stop_grace_period"`
	Restart         string   `json:"restart"`
	TTY             bool     `json:"tty"`
	Profiles        []string `json:"profiles"`
}

// The compose file runs the Procfile's cluster: NATS with JetStream at the
// version the tests use, Redis with its append-only file, one frontend and
// two workers, each a codexec command with real flags.
func TestComposeFile(t *testing.T) {
	dir := deployDir(t)
	data, err := os.ReadFile(filepath.Join(dir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.UnmarshalStrict(data, &cf); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	roles := map[string][]string{}
	for name, s := range cf.Services {
		where := "compose " + name
		for _, d := range s.DependsOn {
			if _, ok := cf.Services[d]; !ok {
				t.Errorf("%s depends on %q, no service", where, d)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if _, ok := cf.Volumes[src]; !ok {
				t.Errorf("%s mounts %q, no volume of the file", where, src)
			}
		}
		if s.Build != nil {
			if _, err := os.Stat(filepath.Join(dir, s.Build.Context, s.Build.Dockerfile)); err != nil {
				t.Errorf("%s builds %s: %v", where, s.Build.Dockerfile, err)
			}
		}
		switch {
		case strings.HasPrefix(s.Image, "codexec"):
			cmd, values := checkArgs(t, where, s.Command)
			roles[cmd] = append(roles[cmd], name)
			if cmd == "worker" {
				if !s.Privileged || !slices.Contains(s.Volumes, "uids:"+sandbox.DefaultUIDDir) || values["data-dir"] == "" {
					t.Errorf("%s: a worker needs privilege, the shared uid register and its data directory: %+v", where, s)
				}
			}
		case strings.HasPrefix(s.Image, "nats:"):
			if want := "nats:" + strings.TrimPrefix(natsServerVersion(t), "v"); s.Image != want || !slices.Contains(s.Command, "-js") {
				t.Errorf("%s: image %s command %q, want %s (the version go.mod pins) with -js", where, s.Image, s.Command, want)
			}
		case strings.HasPrefix(s.Image, "redis:"):
			if !strings.Contains(strings.Join(s.Command, " "), "--appendonly yes") {
				t.Errorf("%s: Redis without its append-only file: %q", where, s.Command)
			}
		default:
			t.Errorf("%s: unexpected image %q", where, s.Image)
		}
	}
	if len(roles["frontend"]) != 1 || len(roles["worker"]) != 2 {
		t.Errorf("roles %v, want one frontend and two workers", roles)
	}
	if len(cf.Services) == 0 || cf.Services["nats"].Image == "" || cf.Services["redis"].Image == "" {
		t.Errorf("services nats and redis are needed: %v", slices.Sorted(mapKeys(cf.Services)))
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// natsServerVersion is the version of nats-server that go.mod pins (the one
// the tests run).
func natsServerVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/nats-io/nats-server/v2 (v\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("go.mod pins no nats-server")
	}
	return string(m[1])
}

// dockerInstruction is one instruction of a Dockerfile, its continuation
// lines joined.
type dockerInstruction struct{ op, args string }

func dockerfile(t *testing.T) []dockerInstruction {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployDir(t), "container", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var out []dockerInstruction
	var cur string
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		cur += " " + strings.TrimSuffix(trimmed, "\\")
		if strings.HasSuffix(trimmed, "\\") {
			continue
		}
		op, args, _ := strings.Cut(strings.TrimSpace(cur), " ")
		out = append(out, dockerInstruction{strings.ToUpper(op), strings.Join(strings.Fields(args), " ")})
		cur = ""
	}
	return out
}

// shellCommands returns the command lines of the ```sh blocks of a
// markdown file, continuation lines joined.
func shellCommands(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in, cur := false, ""
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			in = true
		case strings.HasPrefix(line, "```"):
			in = false
		case in:
			l, _, _ := strings.Cut(line, " #")
			cur += " " + strings.TrimSuffix(strings.TrimSpace(l), "\\")
			if !strings.HasSuffix(strings.TrimSpace(l), "\\") {
				if c := strings.Join(strings.Fields(cur), " "); c != "" {
					out = append(out, c)
				}
				cur = ""
			}
		}
	}
	return out
}

// The image is built and run as the READMEs document: the binary with
// `make build` (README), into bin/codexec, which the runtime stage copies and
// runs as its entry point; the Debian packages the READMEs name; uv as
// .ci/install-deps installs it. deploy/README.md's `docker build` builds
// this Dockerfile, and each of its `docker run` and `codexec` lines is a
// codexec command with real flags.
func TestDockerfileMatchesREADME(t *testing.T) {
	root := filepath.Dir(deployDir(t))
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	installDeps, err := os.ReadFile(filepath.Join(root, ".ci", "install-deps"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, []byte("`make build` puts it at `bin/codexec`")) ||
		!regexp.MustCompile(`(?m)^build:.*\n\t\$\(GO\) build -o \$\(BIN\)/codexec \./cmd/codexec$`).Match(makefile) ||
		!regexp.MustCompile(`(?m)^BIN\s*:= bin$`).Match(makefile) {
		t.Fatal("README and Makefile no longer say that `make build` writes bin/codexec: update this test and the Dockerfile together")
	}

	var runs, copies, from []string
	var entry string
	for _, in := range dockerfile(t) {
		switch in.op {
		case "RUN":
			runs = append(runs, in.args)
		case "COPY":
			copies = append(copies, in.args)
		case "FROM":
			from = append(from, in.args)
		case "ENTRYPOINT":
			entry = in.args
		}
	}
	if len(from) != 2 || !strings.HasSuffix(from[0], " AS build") {
		t.Errorf("FROM %q: want a build stage and a runtime stage", from)
	}
	if !slices.Contains(runs, "make build") {
		t.Errorf("the build stage does not run `make build`: RUN %q", runs)
	}
	if !slices.Contains(copies, "--from=build /src/bin/codexec /usr/local/bin/codexec") || entry != `["/usr/local/bin/codexec"]` {
		t.Errorf("the runtime does not run the binary `make build` wrote: COPY %q, ENTRYPOINT %s", copies, entry)
	}
	apt := regexp.MustCompile(`apt-get install -y --no-install-recommends ([a-z0-9 .-]+)`)
	var pkgs []string
	for _, r := range runs {
		if m := apt.FindStringSubmatch(r); m != nil {
			pkgs = append(pkgs, strings.Fields(m[1])...)
		}
	}
	deployReadme, err := os.ReadFile(filepath.Join(root, "deploy", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"python3", "python3-venv", "bubblewrap", "e2fsprogs"} {
		if !slices.Contains(pkgs, p) {
			t.Errorf("the runtime does not install %s (apt-get install %q)", p, pkgs)
		}
	}
	if !bytes.Contains(readme, []byte("`python3`\nwith `venv`")) && !bytes.Contains(readme, []byte("`python3` with `venv`")) {
		t.Error("README no longer names python3 with venv: update this test and the Dockerfile together")
	}
	if !bytes.Contains(deployReadme, []byte("apt-get install\nbubblewrap")) && !bytes.Contains(deployReadme, []byte("apt-get install bubblewrap")) {
		t.Error("deploy/README.md no longer names bubblewrap's package: update this test and the Dockerfile together")
	}
	uvInstall := regexp.MustCompile(`python -m pip install [^\n]*\buv\b`)
	if !uvInstall.Match(installDeps) || !slices.ContainsFunc(runs, func(r string) bool {
		return strings.Contains(r, "python3 -m venv /opt/uv") && uvInstall.MatchString(r)
	}) {
		t.Errorf("uv is not installed as .ci/install-deps installs it (a venv of its own, pip install uv): RUN %q", runs)
	}

	// deploy/README.md: docker build of this Dockerfile, docker run of its
	// image, and the role commands.
	var tag string
	var builds, dockerRuns, roles int
	for _, line := range shellCommands(t, filepath.Join(root, "deploy", "README.md")) {
		args := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "docker build "):
			builds++
			f := slices.Index(args, "-f")
			tg := slices.Index(args, "-t")
			if f < 0 || tg < 0 || args[f+1] != "deploy/container/Dockerfile" || args[len(args)-1] != "." {
				t.Errorf("deploy/README.md: %q does not build deploy/container/Dockerfile from the repository root", line)
				continue
			}
			tag = args[tg+1]
		case strings.HasPrefix(line, "docker run "):
			dockerRuns++
			i := slices.Index(args, tag)
			if tag == "" || i < 0 {
				t.Errorf("deploy/README.md: %q does not run the image built above (%q)", line, tag)
				continue
			}
			checkArgs(t, "deploy/README.md: "+line, args[i+1:])
		case strings.HasPrefix(line, "codexec "):
			roles++
			checkArgs(t, "deploy/README.md: "+line, args[1:])
		}
	}
	if builds != 1 || dockerRuns < 2 || roles < 2 {
		t.Errorf("deploy/README.md documents %d docker build, %d docker run and %d codexec commands; want the build, the runs of a frontend and a worker, and the role commands", builds, dockerRuns, roles)
	}
}
