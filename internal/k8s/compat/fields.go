package compat

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// image is the reference as the kubelet pulls it: "app" and
// "docker.io/library/app:latest" are the same image. A reference that
// does not parse stays as written; the kubelet would refuse it anyway.
func image(ref string) string {
	n, err := reference.ParseNormalizedNamed(strings.TrimSpace(ref))
	if err != nil {
		return ref
	}
	return reference.TagNameOnly(n).String()
}

// env is one variable; From is the canonical source of a valueFrom.
type env struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
	From  string `json:"from,omitempty"`
}

// envs keeps the order: a value may refer to an earlier variable as
// $(NAME), and a later duplicate wins, so the order is part of the
// meaning.
func envs(in []corev1.EnvVar) []env {
	out := []env{}
	for _, e := range in {
		out = append(out, env{Name: e.Name, Value: e.Value, From: valueFrom(e.ValueFrom)})
	}
	return out
}

// valueFrom writes a source with the apiserver's defaults filled in
// (fieldRef's apiVersion v1, resourceFieldRef's divisor 1).
func valueFrom(v *corev1.EnvVarSource) string {
	switch {
	case v == nil:
		return ""
	case v.FieldRef != nil:
		return "field:" + or(v.FieldRef.APIVersion, "v1") + ":" + v.FieldRef.FieldPath
	case v.ResourceFieldRef != nil:
		r := v.ResourceFieldRef
		return "resource:" + r.ContainerName + ":" + r.Resource + ":" + quantity(r.Divisor, "1")
	case v.ConfigMapKeyRef != nil:
		r := v.ConfigMapKeyRef
		return "configMap:" + r.Name + ":" + r.Key + ":" + flag(r.Optional, false)
	case v.SecretKeyRef != nil:
		r := v.SecretKeyRef
		return "secret:" + r.Name + ":" + r.Key + ":" + flag(r.Optional, false)
	}
	b, _ := json.Marshal(v) // a source newer than this code: as written
	return "other:" + string(b)
}

// envFrom is one source of variables, in order: a later one wins.
type envFrom struct {
	Prefix   string `json:"prefix"`
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	Optional string `json:"optional"`
}

func envFroms(in []corev1.EnvFromSource) []envFrom {
	out := []envFrom{}
	for _, e := range in {
		f := envFrom{Prefix: e.Prefix}
		switch {
		case e.ConfigMapRef != nil:
			f.Kind, f.Name, f.Optional = "configMap", e.ConfigMapRef.Name, flag(e.ConfigMapRef.Optional, false)
		case e.SecretRef != nil:
			f.Kind, f.Name, f.Optional = "secret", e.SecretRef.Name, flag(e.SecretRef.Optional, false)
		}
		out = append(out, f)
	}
	return out
}

// port leaves out the name: only Services read it.
type port struct {
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostPort      int32  `json:"hostPort"`
	HostIP        string `json:"hostIP"`
}

// ports is a set, sorted; with host networking the apiserver sets an
// unset hostPort to the containerPort.
func ports(in []corev1.ContainerPort, hostNetwork bool) []port {
	out := []port{}
	for _, p := range in {
		q := port{ContainerPort: p.ContainerPort, Protocol: or(string(p.Protocol), "TCP"), HostPort: p.HostPort, HostIP: p.HostIP}
		if hostNetwork && q.HostPort == 0 {
			q.HostPort = q.ContainerPort
		}
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.ContainerPort != b.ContainerPort {
			return a.ContainerPort < b.ContainerPort
		}
		return a.Protocol+a.HostIP < b.Protocol+b.HostIP
	})
	return out
}

// mount is a volume mount by what the process sees: the path, the kind of
// volume behind it and how it is mounted. The volume's name is left out:
// it is a pod-local handle, and a per-pod one for the service account's
// token (kube-api-access-<random>).
type mount struct {
	Path              string `json:"path"`
	Kind              string `json:"kind"`
	ReadOnly          bool   `json:"readOnly"`
	SubPath           string `json:"subPath"`
	SubPathExpr       string `json:"subPathExpr"`
	Propagation       string `json:"propagation"`
	RecursiveReadOnly string `json:"recursiveReadOnly"`
}

func mounts(in []corev1.VolumeMount, vols []corev1.Volume) []mount {
	kinds := map[string]string{}
	for _, v := range vols {
		kinds[v.Name] = volumeKind(v.VolumeSource)
	}
	out := []mount{}
	for _, m := range in {
		out = append(out, mount{
			Path: m.MountPath, Kind: kinds[m.Name], ReadOnly: m.ReadOnly, SubPath: m.SubPath, SubPathExpr: m.SubPathExpr,
			Propagation:       or(ptrString(m.MountPropagation), string(corev1.MountPropagationNone)),
			RecursiveReadOnly: or(ptrString(m.RecursiveReadOnly), string(corev1.RecursiveReadOnlyDisabled)),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// volumeKind is the one source field a volume sets (emptyDir, projected,
// persistentVolumeClaim, …), read from its JSON so that kinds newer than
// this code count too. Which claim or ConfigMap is behind it is left out:
// a StatefulSet's replicas mount claims of different names.
func volumeKind(s corev1.VolumeSource) string {
	b, _ := json.Marshal(s)
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(b, &fields)
	var kinds []string
	for k := range fields {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return strings.Join(kinds, "+")
}

func devices(in []corev1.VolumeDevice) []string {
	out := []string{}
	for _, d := range in {
		out = append(out, d.DevicePath)
	}
	sort.Strings(out)
	return out
}

// gpus are the container's NVIDIA resources (nvidia.com/gpu and MIG
// slices, nvidia.com/mig-*), limits and requests; the apiserver copies an
// extended resource's limit into an unset request.
func gpus(r corev1.ResourceRequirements) map[string]string {
	out := map[string]string{}
	for name, q := range r.Limits {
		if isGPU(name) {
			out["limits/"+string(name)] = q.String()
			out["requests/"+string(name)] = q.String()
		}
	}
	for name, q := range r.Requests {
		if isGPU(name) {
			out["requests/"+string(name)] = q.String()
		}
	}
	return out
}

func isGPU(name corev1.ResourceName) bool { return strings.HasPrefix(string(name), "nvidia.com/") }

// quantity writes q canonically ("1000m" is "1"), def when it is zero.
func quantity(q resource.Quantity, def string) string {
	if q.IsZero() {
		return def
	}
	return q.String()
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func flag(b *bool, def bool) string {
	if b != nil {
		def = *b
	}
	if def {
		return "true"
	}
	return "false"
}

func ptrString[T ~string](p *T) string {
	if p == nil {
		return ""
	}
	return string(*p)
}
