package ctrd

import (
	"errors"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/report"
)

// TestParseMount: ctr's --mount syntax; a bind mount gets rbind unless it
// names bind or rbind; relative paths and unknown keys are refused.
func TestParseMount(t *testing.T) {
	m, err := ParseMount("type=bind,src=/srv/data,dst=/data,options=ro")
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != "bind" || m.Source != "/srv/data" || m.Destination != "/data" || strings.Join(m.Options, ":") != "ro:rbind" {
		t.Errorf("parsed %+v", m)
	}
	if m, _ := ParseMount("src=/a,dst=/b,options=bind"); strings.Join(m.Options, ":") != "bind" {
		t.Errorf("bind kept as %v", m.Options)
	}
	for _, bad := range []string{"src=a,dst=/b", "src=/a,dst=b", "src=/a,dst=/b,mode=1", "src=/a,/b"} {
		if _, err := ParseMount(bad); !errors.Is(err, ErrMount) {
			t.Errorf("%s: got %v, want %v", bad, err, ErrMount)
		}
	}
}

// TestMissingMount: CRIU's line for a bind mount the new spec lacks, as
// the shim passes it on, becomes a StepError naming the mount and --mount.
func TestMissingMount(t *testing.T) {
	cause := errors.New("failed to start shim: criu restore failed: mnt: No mapping for 1234:/data mountpoint: unknown")
	err := missingMount("app2", t.TempDir(), cause)
	var se *report.StepError
	if !errors.As(err, &se) || !errors.Is(err, ErrMissingMount) {
		t.Fatalf("got %v, want a StepError wrapping %v", err, ErrMissingMount)
	}
	msg := err.Error()
	for _, want := range []string{"restore of app2 failed", "mount at /data", "remedy: ", "--mount type=bind,src=HOST-DIR,dst=/data"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	// CRIU 4.2 prints "(null)" for the path; without images to look the
	// mount up in, the report names CRIU's mount id.
	err = missingMount("app2", t.TempDir(), errors.New("criu restore failed: mnt: No mapping for 110:(null) mountpoint"))
	if !errors.Is(err, ErrMissingMount) || !strings.Contains(err.Error(), "CRIU's mount 110") || !strings.Contains(err.Error(), "dst=PATH") {
		t.Errorf("(null) path: %v", err)
	}
	if missingMount("app2", t.TempDir(), errors.New("criu restore failed: Can't open file")) != nil {
		t.Error("another CRIU failure was taken for a missing mount")
	}
}
