package ctrd

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/ociimage"
)

// TestReadCarried: of a checkpoint's spec, a restore reads the terminal
// flag, the command line and the names of its GPU nodes, never their
// device numbers or any other device.
func TestReadCarried(t *testing.T) {
	dir := t.TempDir()
	spec := `{"ociVersion":"1.2.0","process":{"terminal":true,"args":["/app","1"],"cwd":"/"},
	  "hooks":{"createRuntime":[{"path":"/bin/sh"}]},
	  "linux":{"devices":[{"path":"/dev/nvidia1","type":"c","major":1,"minor":1},
	    {"path":"/dev/nvidiactl","type":"c","major":195,"minor":255},{"path":"/dev/hostmem","type":"c","major":1,"minor":1}]}}`
	if err := os.WriteFile(filepath.Join(dir, ociimage.SpecDumpName), []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := readCarried(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !c.terminal || !slices.Equal(c.args, []string{"/app", "1"}) || !slices.Equal(c.gpuNames, []string{"nvidia1"}) {
		t.Errorf("carried %+v", c)
	}
}

// TestRecordedGPUsMissing: a GPU node the checkpoint ran with that this
// host lacks is refused with --gpus as the remedy.
func TestRecordedGPUsMissing(t *testing.T) {
	if _, err := os.Stat("/dev/nvidia250"); err == nil {
		t.Skip("this host has /dev/nvidia250")
	}
	_, err := recordedGPUs([]string{"nvidia250"})
	if !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "remedy: pass --gpus") {
		t.Fatalf("got %v, want %v with --gpus as the remedy", err, ErrNoGPU)
	}
}
