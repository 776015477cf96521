package compat

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Version prefixes every key: a change to the canonical form changes the
// prefix, so that a key made by an older cryo never matches by accident.
const Version = "v1"

// ErrNoContainer: the pod has no container of that name.
var ErrNoContainer = errors.New("no such container in the pod")

// canonical is what the key hashes. Its JSON encoding is the input of the
// hash; encoding/json writes struct fields in declaration order and map
// keys sorted, so the bytes depend only on the values.
type canonical struct {
	Image      string            `json:"image"`
	Command    []string          `json:"command"`
	Args       []string          `json:"args"`
	WorkingDir string            `json:"workingDir"`
	TTY        bool              `json:"tty"`
	Stdin      bool              `json:"stdin"`
	Env        []env             `json:"env"`
	EnvFrom    []envFrom         `json:"envFrom"`
	Ports      []port            `json:"ports"`
	Mounts     []mount           `json:"mounts"`
	Devices    []string          `json:"devices"`
	GPU        map[string]string `json:"gpu"`
	Security   security          `json:"security"`
}

// Key is the compatibility key of container name of spec.
func Key(spec *corev1.PodSpec, name string) (string, error) {
	c := find(spec, name)
	if c == nil {
		return "", fmt.Errorf("container %q: %w", name, ErrNoContainer)
	}
	can := canonical{
		Image: image(c.Image), Command: list(c.Command), Args: list(c.Args),
		WorkingDir: c.WorkingDir, TTY: c.TTY, Stdin: c.Stdin,
		Env: envs(c.Env), EnvFrom: envFroms(c.EnvFrom), Ports: ports(c.Ports, spec.HostNetwork),
		Mounts: mounts(c.VolumeMounts, spec.Volumes), Devices: devices(c.VolumeDevices),
		GPU: gpus(c.Resources), Security: securityOf(spec, c),
	}
	b, err := json.Marshal(can)
	if err != nil {
		return "", fmt.Errorf("container %q: encode its canonical form: %w", name, err)
	}
	sum := sha256.Sum256(b)
	return Version + "-" + hex.EncodeToString(sum[:]), nil
}

// find is the regular container name; init and ephemeral containers are
// not checkpointed.
func find(spec *corev1.PodSpec, name string) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	return nil
}

// list makes nil and empty the same: JSON "null" and "[]" would differ.
func list(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
