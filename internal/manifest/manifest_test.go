package manifest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/version"
)

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	m := New("ctr1")
	h100 := cuda.ProcessGPU{UUID: "GPU-a", Name: "NVIDIA H100", ComputeCapability: "9.0", Memory: 1 << 30}
	m.Processes = []Process{{PID: 42, State: "running", GPUs: []cuda.ProcessGPU{h100}}}
	m.Needs = NeedsFromProcesses(m.Processes)
	m.AddStep("suspend", 1500*time.Millisecond, nil)
	if err := Write(dir, m); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.ContainerID != "ctr1" || !got.HasCUDA() || got.Steps[0].Duration() != 1500*time.Millisecond {
		t.Fatalf("round trip: %+v", got)
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read(filepath.Join(dir, "nope")); !errors.Is(err, ErrNotCheckpoint) {
		t.Fatalf("missing dir: %v", err)
	}
	if _, err := Read(dir); !errors.Is(err, ErrNoManifest) {
		t.Fatalf("no manifest: %v", err)
	}
	os.WriteFile(filepath.Join(dir, ManifestName), []byte("{"), 0o644)
	if _, err := Read(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad json: %v", err)
	}
	os.WriteFile(filepath.Join(dir, ManifestName), []byte(`{"version":99}`), 0o644)
	if _, err := Read(dir); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("future version: %v", err)
	}
}

func TestReadVersions(t *testing.T) {
	dir := t.TempDir()
	for v := 1; v <= FormatVersion; v++ {
		os.WriteFile(filepath.Join(dir, ManifestName), []byte(fmt.Sprintf(`{"version":%d}`, v)), 0o644)
		if _, err := Read(dir); err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
	}
	if New("c").Version != 3 {
		t.Fatal("new manifests must be version 3: chunked digests and per-process GPUs")
	}
	os.WriteFile(filepath.Join(dir, ManifestName), []byte(fmt.Sprintf(`{"version":%d}`, FormatVersion+1)), 0o644)
	if _, err := Read(dir); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("future version: %v", err)
	}
}

func TestImageDir(t *testing.T) {
	dir := t.TempDir()
	if ok, err := IsImageDir(dir); ok || err != nil {
		t.Fatalf("empty dir: %v %v", ok, err)
	}
	os.WriteFile(filepath.Join(dir, "inventory.img"), nil, 0o644)
	if ok, _ := IsImageDir(dir); !ok {
		t.Fatal("inventory.img not seen")
	}
	os.WriteFile(filepath.Join(dir, "files.img"), []byte("\x00/usr/lib/libcuda.so.1\x00"), 0o644)
	if ok, _ := ReferencesCUDA(dir); !ok {
		t.Fatal("libcuda not seen")
	}
}

// An attacker's manifest: CUDA processes whose GPUs the needs leave out,
// so that the host check, which runs from the needs, would let a host
// without those GPUs through. Each is refused by Read itself.
func TestReadRefusesInconsistent(t *testing.T) {
	const proc = `{"pid": 7, "state": "running", "nspid": 1, "gpus": [{"uuid": "GPU-a", "name": "NVIDIA H100", "compute_capability": "9.0", "memory": 1073741824}]}`
	const need = `{"uuid": "GPU-a", "name": "NVIDIA H100", "compute_capability": "9.0", "memory": 1073741824}`
	const procs = `"processes": [` + proc + `]`
	cases := map[string]string{
		"no needs":           procs + `, "needs": []`,
		"needs absent":       procs,
		"another GPU":        procs + `, "needs": [{"uuid": "GPU-b", "name": "NVIDIA H100", "compute_capability": "9.0", "memory": 1073741824}]`,
		"another model":      procs + `, "needs": [{"uuid": "GPU-a", "name": "NVIDIA A100", "compute_capability": "8.0", "memory": 1073741824}]`,
		"less memory":        procs + `, "needs": [{"uuid": "GPU-a", "name": "NVIDIA H100", "compute_capability": "9.0", "memory": 1024}]`,
		"the same GPU twice": procs + `, "needs": [` + need + `, ` + need + `]`,
		"a process left out": `"processes": [` + proc + `, {"pid": 8, "state": "running", "gpus": [{"uuid": "GPU-z", "name": "NVIDIA B200", "compute_capability": "10.0"}]}], "needs": [` + need + `]`,
	}
	for name, fields := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			body := `{"version": 3, ` + fields + `}`
			if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Read(dir)
			if !errors.Is(err, ErrManifestInconsistent) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Read: %v, want ErrManifestInconsistent (and ErrCorrupt)", err)
			}
		})
	}
	// The same manifest with the needs cryo writes reads; so do a manifest
	// without CUDA processes and one older than per-process GPUs whose
	// needs are the source host's GPUs.
	for name, body := range map[string]string{
		"consistent":  `{"version": 3, "processes": [` + proc + `], "needs": [` + need + `]}`,
		"no CUDA":     `{"version": 3, "processes": [], "needs": []}`,
		"version 2":   `{"version": 2, "processes": [{"pid": 7, "state": "running"}], "needs": [` + need + `]}`,
		"several GPU": `{"version": 3, "processes": [` + proc + `, ` + proc + `], "needs": [{"uuid": "GPU-a", "name": "NVIDIA H100", "compute_capability": "9.0", "memory": 2147483648}]}`,
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, ManifestName), []byte(body), 0o600)
		if _, err := Read(dir); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// New records what takes the checkpoint; a manifest written before those
// fields existed reads with them empty.
func TestManifestVersions(t *testing.T) {
	dir := t.TempDir()
	m := New("ctr1")
	m.CRIUVersion = "4.2.1"
	if m.CryoVersion != version.String() || m.Kernel == "" {
		t.Fatalf("New: cryo %q kernel %q", m.CryoVersion, m.Kernel)
	}
	if err := Write(dir, m); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil || got.CryoVersion != m.CryoVersion || got.CRIUVersion != "4.2.1" || got.Kernel != m.Kernel {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	old := `{"version": 3, "container_id": "c", "created": "2026-01-02T03:04:05Z", "hostname": "h", "processes": [], "steps": []}`
	if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = Read(dir)
	if err != nil || got.CryoVersion != "" || got.CRIUVersion != "" || got.Kernel != "" {
		t.Fatalf("older manifest: %+v, %v", got, err)
	}
}

func TestStepsText(t *testing.T) {
	got := StepsText([]Step{{Name: "verify", Seconds: 0.0124}, {Name: "restore", Seconds: 3.2}})
	if want := "verify 0.012s, restore 3.200s"; got != want {
		t.Fatalf("StepsText = %q, want %q", got, want)
	}
	if got := StepsText(nil); got != "" {
		t.Fatalf("StepsText(nil) = %q, want empty", got)
	}
}
