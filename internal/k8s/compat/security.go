package compat

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// security is the container's effective security context: a container's
// field if it sets one, else the pod's, with the kubelet's meaning of an
// unset field written out, so that nil, {} and the explicit default are
// one value.
type security struct {
	HostNetwork bool `json:"hostNetwork"`
	HostPID     bool `json:"hostPID"`
	HostIPC     bool `json:"hostIPC"`
	SharePID    bool `json:"sharePID"`
	HostUsers   bool `json:"hostUsers"`

	RunAsUser    string `json:"runAsUser"`
	RunAsGroup   string `json:"runAsGroup"`
	RunAsNonRoot bool   `json:"runAsNonRoot"`
	SELinux      string `json:"seLinux"`
	Seccomp      string `json:"seccomp"`
	AppArmor     string `json:"appArmor"`

	FSGroup            string   `json:"fsGroup"`
	SupplementalGroups []int64  `json:"supplementalGroups"`
	SupplementalPolicy string   `json:"supplementalPolicy"`
	Sysctls            []string `json:"sysctls"`

	Privileged   bool     `json:"privileged"`
	CapAdd       []string `json:"capAdd"`
	CapDrop      []string `json:"capDrop"`
	ReadOnlyRoot bool     `json:"readOnlyRoot"`
	AllowPrivEsc bool     `json:"allowPrivilegeEscalation"`
	ProcMount    string   `json:"procMount"`
}

func securityOf(spec *corev1.PodSpec, c *corev1.Container) security {
	p := spec.SecurityContext
	if p == nil {
		p = &corev1.PodSecurityContext{}
	}
	k := c.SecurityContext
	if k == nil {
		k = &corev1.SecurityContext{}
	}
	s := security{
		HostNetwork: spec.HostNetwork, HostPID: spec.HostPID, HostIPC: spec.HostIPC,
		SharePID: boolOr(spec.ShareProcessNamespace, false), HostUsers: boolOr(spec.HostUsers, true),
		RunAsUser:          int64Str(first(k.RunAsUser, p.RunAsUser)),
		RunAsGroup:         int64Str(first(k.RunAsGroup, p.RunAsGroup)),
		RunAsNonRoot:       boolOr(first(k.RunAsNonRoot, p.RunAsNonRoot), false),
		SELinux:            asJSON(first(k.SELinuxOptions, p.SELinuxOptions)),
		Seccomp:            asJSON(first(k.SeccompProfile, p.SeccompProfile)),
		AppArmor:           asJSON(first(k.AppArmorProfile, p.AppArmorProfile)),
		FSGroup:            int64Str(p.FSGroup),
		SupplementalGroups: groups(p.SupplementalGroups),
		SupplementalPolicy: or(ptrString(p.SupplementalGroupsPolicy), string(corev1.SupplementalGroupsPolicyMerge)),
		Sysctls:            sysctls(p.Sysctls),
		Privileged:         boolOr(k.Privileged, false),
		ReadOnlyRoot:       boolOr(k.ReadOnlyRootFilesystem, false),
		// Unset, the kubelet leaves no_new_privs off.
		AllowPrivEsc: boolOr(k.AllowPrivilegeEscalation, true),
		ProcMount:    or(ptrString(k.ProcMount), string(corev1.DefaultProcMount)),
	}
	s.CapAdd, s.CapDrop = []string{}, []string{}
	if k.Capabilities != nil {
		s.CapAdd, s.CapDrop = caps(k.Capabilities.Add), caps(k.Capabilities.Drop)
	}
	return s
}

// caps is a set of capabilities as the runtime reads them: containerd
// adds the CAP_ prefix to a name without it, and case does not matter.
func caps(in []corev1.Capability) []string {
	set := map[string]bool{}
	for _, c := range in {
		n := strings.ToUpper(strings.TrimSpace(string(c)))
		set[strings.TrimPrefix(n, "CAP_")] = true
	}
	return sortedKeys(set)
}

func groups(in []int64) []int64 {
	set := map[int64]bool{}
	for _, g := range in {
		set[g] = true
	}
	out := []int64{}
	for g := range set {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func sysctls(in []corev1.Sysctl) []string {
	set := map[string]bool{}
	for _, s := range in {
		set[s.Name+"="+s.Value] = true
	}
	return sortedKeys(set)
}

func sortedKeys(set map[string]bool) []string {
	out := []string{}
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// first is the container's setting if it has one, else the pod's.
func first[T any](container, pod *T) *T {
	if container != nil {
		return container
	}
	return pod
}

func boolOr(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

func int64Str(p *int64) string {
	if p == nil {
		return ""
	}
	return strconv.FormatInt(*p, 10)
}

func asJSON[T any](p *T) string {
	if p == nil {
		return ""
	}
	b, _ := json.Marshal(p)
	return string(b)
}
