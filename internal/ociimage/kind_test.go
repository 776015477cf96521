package ociimage

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cryo-gpu/cryo/internal/manifest"
)

// exportDir lays out an extracted container export: checkpoint/ with an
// inventory, a config.dump naming runtime, and CRI's status.dump if cri.
func exportDir(t *testing.T, runtime string, cri bool) string {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, checkpointDir), 0o700)
	os.WriteFile(filepath.Join(root, checkpointDir, "inventory.img"), []byte("inventory"), 0o600)
	os.WriteFile(filepath.Join(root, configDumpName), []byte(`{"id":"c1","name":"app","runtime":"`+runtime+`"}`), 0o600)
	if cri {
		os.WriteFile(filepath.Join(root, statusDumpName), []byte(`{}`), 0o600)
	}
	return root
}

// A kubelet archive (containerd runtime type and CRI's status) is a kind
// of its own; a Podman or CRI-O export (an OCI runtime binary) stays podman.
func TestKubeletKind(t *testing.T) {
	for _, c := range []struct {
		runtime string
		cri     bool
		want    Kind
	}{
		{"io.containerd.cryo.v2", true, KindKubelet},
		{"io.containerd.runc.v2", true, KindKubelet},
		{"runc", false, KindPodman},
		{"cryo-runc", true, KindPodman},
		{"io.containerd.runc.v2", false, KindPodman},
	} {
		s, err := OpenSource(exportDir(t, c.runtime, c.cri), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if s.Kind != c.want {
			t.Errorf("runtime %q, status.dump %v: kind %q, want %q", c.runtime, c.cri, s.Kind, c.want)
		}
	}
}

// A container's CUDA process is listed once, under the pid CRIU's pstree
// gives it (its pid in the container), not again under its host pid.
func TestSummaryCUDAProcessOnce(t *testing.T) {
	sum := &Summary{Processes: []ProcessInfo{{PID: 1, Comm: "fakecuda-app"}, {PID: 7, Comm: "sh"}}}
	addManifest(sum, &manifest.Manifest{Processes: []manifest.Process{{PID: 8676, NSPID: 1, GPUMemory: 1 << 20}}})
	if len(sum.Processes) != 2 || !sum.Processes[0].CUDA || sum.Processes[0].GPUMemory != 1<<20 || sum.Processes[1].CUDA {
		t.Fatalf("processes %+v, want pid 1 CUDA with 1 MiB and pid 7 not", sum.Processes)
	}
	// A manifest without NSPID (version < 3), of a process on the host.
	sum = &Summary{Processes: []ProcessInfo{{PID: 4242, Comm: "app"}}}
	addManifest(sum, &manifest.Manifest{Processes: []manifest.Process{{PID: 4242}}})
	if len(sum.Processes) != 1 || !sum.Processes[0].CUDA {
		t.Fatalf("processes %+v, want pid 4242 CUDA", sum.Processes)
	}
}
