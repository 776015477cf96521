package config

import (
	"fmt"
	"os"
	"path/filepath"
)

// authFiles lists, in the order Podman and Docker search them, the
// registry auth files a node or a user already has, so that cryo pushes and
// pulls with the credentials `podman login` or `docker login` stored.
func authFiles(env map[string]string) []string {
	var files []string
	add := func(p string) {
		if p != "" {
			files = append(files, p)
		}
	}
	add(env["REGISTRY_AUTH_FILE"])
	if d := env["XDG_RUNTIME_DIR"]; d != "" {
		add(filepath.Join(d, "containers", "auth.json"))
	}
	add(fmt.Sprintf("/run/containers/%d/auth.json", os.Getuid()))
	home, _ := os.UserHomeDir()
	if d := env["XDG_CONFIG_HOME"]; d != "" {
		add(filepath.Join(d, "containers", "auth.json"))
	} else if home != "" {
		add(filepath.Join(home, ".config", "containers", "auth.json"))
	}
	if d := env["DOCKER_CONFIG"]; d != "" {
		add(filepath.Join(d, "config.json"))
	} else if home != "" {
		add(filepath.Join(home, ".docker", "config.json"))
	}
	return files
}
