package orchestrate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/report"
)

func TestBareRestoreRemedy(t *testing.T) {
	for msg, want := range map[string]string{
		"criu restore failed: inet: Can't bind inet socket (id 123): Address already in use": "another socket holds a port",
		"criu restore failed: Can't fork for 754: File exists":                               "a pid of the checkpoint is in use",
		"criu restore failed: something else":                                                "read the CRIU log",
	} {
		if got := bareRestoreRemedy(errors.New(msg)); !strings.HasPrefix(got, want) {
			t.Errorf("%s: remedy %q, want it to start with %q", msg, got, want)
		}
	}
}

// CRIU's file validation on restore is a file that changed since the
// checkpoint: the remedy names the file and the sizes, read from CRIU's
// log as the error quotes it, not "read the CRIU log".
func TestRestoreRemedyFileChanged(t *testing.T) {
	log := filepath.Join(t.TempDir(), "restore.log")
	line := "(00.031245) Error (criu/files-reg.c:2175): File /srv/app.log has bad size 2787 (expect 699)\n"
	if err := os.WriteFile(log, []byte("(00.000001) Version: 4.2.1\n"+line+"(00.040000) Error (criu/cr-restore.c:2600): Restoring FAILED.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := &CRIUError{Op: "restore", LogPath: log, Err: errors.New("exit status 1")}
	want := "the file /srv/app.log changed since the checkpoint (2787 bytes now, 699 then"
	if got := bareRestoreRemedy(err); !strings.HasPrefix(got, want) || !strings.Contains(got, "truncate -s 699 /srv/app.log") {
		t.Errorf("bare restore remedy %q, want it to start with %q and give the truncate", got, want)
	}
	o := New()
	if got := dumpRemedy(o.FrontEnd, err); !strings.HasPrefix(got, want) {
		t.Errorf("CRIU failure remedy %q, want %q", got, want)
	}
}

// A restore onto a host without the NVIDIA driver lists no GPU, so its
// remedy says to install the driver, not "the GPUs and driver above".
func TestRestoreRemedyNoDriver(t *testing.T) {
	m := &manifest.Manifest{
		Processes: []manifest.Process{{PID: 7}},
		Needs:     []manifest.GPUNeed{{UUID: "GPU-a", Name: "NVIDIA H200", Memory: 1 << 20}},
		Inventory: cuda.Inventory{DriverVersion: "580.95.05"},
	}
	_, err := manifest.CheckHost(m, cuda.Inventory{}, nil, nil)
	se := &report.StepError{Op: "restore", ID: "app", Step: StepVerify, Err: err, Outcome: "nothing was restored", Remedy: restoreRemedy(err, "/ckpt")}
	msg := se.Error()
	if !strings.Contains(msg, "remedy: install the NVIDIA driver (580.95.05 or later)") || strings.Contains(msg, "above") {
		t.Fatalf("no driver: %s", msg)
	}
}
