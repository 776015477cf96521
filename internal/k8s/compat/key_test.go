package compat

import (
	"encoding/json"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// template is a Deployment's pod template as its author writes it: no
// defaults, sets in one order.
const template = `{
  "securityContext": {"runAsUser": 1000, "supplementalGroups": [20, 10]},
  "containers": [{
    "name": "app", "image": "busybox",
    "command": ["sh", "-c"], "args": ["serve"],
    "env": [{"name": "A", "value": "1"}, {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
    "envFrom": [{"configMapRef": {"name": "cfg"}}],
    "ports": [{"containerPort": 9000, "name": "metrics"}, {"containerPort": 8080, "protocol": "UDP"}],
    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    "resources": {"limits": {"nvidia.com/gpu": 1}},
    "securityContext": {"capabilities": {"add": ["cap_sys_ptrace", "NET_ADMIN"], "drop": ["ALL"]}}
  }],
  "volumes": [{"name": "data", "emptyDir": {}}]
}`

// served is the same pod as the apiserver returns it once created: its
// defaults filled in, the service account's token mounted under a random
// volume name (in both: admission adds it before the webhook sees the
// new pod), sets in another order, the pod-level fields the kubelet does
// not read for the key (restartPolicy, dnsPolicy, tolerations…).
const served = `{
  "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
  "terminationGracePeriodSeconds": 30, "enableServiceLinks": true, "nodeName": "n1",
  "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
  "securityContext": {"supplementalGroups": [10, 20], "runAsUser": 1000},
  "containers": [{
    "name": "app", "image": "docker.io/library/busybox:latest", "imagePullPolicy": "Always",
    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
    "command": ["sh", "-c"], "args": ["serve"],
    "env": [{"name": "A", "value": "1"}, {"name": "POD", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
    "envFrom": [{"configMapRef": {"name": "cfg"}}],
    "ports": [{"containerPort": 8080, "protocol": "UDP"}, {"containerPort": 9000, "name": "metrics", "protocol": "TCP"}],
    "volumeMounts": [
      {"name": "kube-api-access-x7k2p", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
      {"name": "data", "mountPath": "/data"}],
    "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
    "securityContext": {"capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN", "SYS_PTRACE"]}}
  }],
  "volumes": [
    {"name": "data", "emptyDir": {}},
    {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}]
}`

// withToken adds the service account token's mount as admission does,
// under its own random name.
func withToken(s *corev1.PodSpec, volume string) {
	s.Volumes = append(s.Volumes, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}})
	c := &s.Containers[0]
	c.VolumeMounts = append([]corev1.VolumeMount{{Name: volume, ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}, c.VolumeMounts...)
}

func spec(t *testing.T, js string) *corev1.PodSpec {
	t.Helper()
	var s corev1.PodSpec
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

func key(t *testing.T, s *corev1.PodSpec) string {
	t.Helper()
	k, err := Key(s, "app")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKeySameForTemplateAndServedPod(t *testing.T) {
	tmpl := spec(t, template)
	withToken(tmpl, "kube-api-access-abcde")
	if a, b := key(t, tmpl), key(t, spec(t, served)); a != b {
		t.Fatalf("template key %s, served pod key %s", a, b)
	}
}

func TestKeyChangesWithWhatMatters(t *testing.T) {
	base := key(t, spec(t, template))
	for name, edit := range map[string]func(*corev1.PodSpec){
		"image":      func(s *corev1.PodSpec) { s.Containers[0].Image = "busybox:1.36" },
		"command":    func(s *corev1.PodSpec) { s.Containers[0].Command = []string{"sh"} },
		"args":       func(s *corev1.PodSpec) { s.Containers[0].Args = nil },
		"env value":  func(s *corev1.PodSpec) { s.Containers[0].Env[0].Value = "2" },
		"env order":  func(s *corev1.PodSpec) { e := s.Containers[0].Env; e[0], e[1] = e[1], e[0] },
		"env field":  func(s *corev1.PodSpec) { s.Containers[0].Env[1].ValueFrom.FieldRef.FieldPath = "metadata.uid" },
		"envFrom":    func(s *corev1.PodSpec) { s.Containers[0].EnvFrom[0].Prefix = "X_" },
		"port":       func(s *corev1.PodSpec) { s.Containers[0].Ports[0].ContainerPort = 9001 },
		"mount path": func(s *corev1.PodSpec) { s.Containers[0].VolumeMounts[0].MountPath = "/var/data" },
		"mount ro":   func(s *corev1.PodSpec) { s.Containers[0].VolumeMounts[0].ReadOnly = true },
		"volume kind": func(s *corev1.PodSpec) {
			s.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/x"}}
		},
		"gpu count": func(s *corev1.PodSpec) {
			s.Containers[0].Resources = spec(t, `{"containers":[{"resources":{"limits":{"nvidia.com/gpu":2}}}]}`).Containers[0].Resources
		},
		"no gpu":   func(s *corev1.PodSpec) { s.Containers[0].Resources = corev1.ResourceRequirements{} },
		"pod user": func(s *corev1.PodSpec) { u := int64(0); s.SecurityContext.RunAsUser = &u },
		"container user": func(s *corev1.PodSpec) {
			u := int64(1000)
			g := int64(5)
			s.Containers[0].SecurityContext.RunAsGroup = &g
			_ = u
		},
		"capability": func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext.Capabilities.Add = append(s.Containers[0].SecurityContext.Capabilities.Add, "SYS_ADMIN")
		},
		"privileged":   func(s *corev1.PodSpec) { p := true; s.Containers[0].SecurityContext.Privileged = &p },
		"no_new_privs": func(s *corev1.PodSpec) { p := false; s.Containers[0].SecurityContext.AllowPrivilegeEscalation = &p },
		"groups":       func(s *corev1.PodSpec) { s.SecurityContext.SupplementalGroups = []int64{10} },
		"host network": func(s *corev1.PodSpec) { s.HostNetwork = true },
		"host pid":     func(s *corev1.PodSpec) { s.HostPID = true },
	} {
		s := spec(t, template)
		edit(s)
		if key(t, s) == base {
			t.Errorf("%s changed, the key did not", name)
		}
	}
}

// A container's own setting wins over the pod's; written at either level
// the effective value, and so the key, is the same.
func TestKeyEffectiveSecurityContext(t *testing.T) {
	a := spec(t, `{"securityContext":{"runAsUser":7},"containers":[{"name":"app","image":"x"}]}`)
	b := spec(t, `{"containers":[{"name":"app","image":"x","securityContext":{"runAsUser":7}}]}`)
	c := spec(t, `{"securityContext":{"runAsUser":1},"containers":[{"name":"app","image":"x","securityContext":{"runAsUser":7}}]}`)
	if key(t, a) != key(t, b) || key(t, b) != key(t, c) {
		t.Fatal("the same effective runAsUser gave different keys")
	}
	// nil, {} and the explicit defaults are one value.
	d := spec(t, `{"containers":[{"name":"app","image":"x"}]}`)
	e := spec(t, `{"securityContext":{},"containers":[{"name":"app","image":"x","securityContext":{"procMount":"Default","privileged":false,"allowPrivilegeEscalation":true}}]}`)
	if key(t, d) != key(t, e) {
		t.Fatal("defaults written out changed the key")
	}
}

func TestKeyNoContainer(t *testing.T) {
	if _, err := Key(spec(t, template), "sidecar"); !errors.Is(err, ErrNoContainer) {
		t.Fatalf("err = %v, want ErrNoContainer", err)
	}
}
