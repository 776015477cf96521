package report

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A remedy put on an error that already has one replaces it: the message
// ends with one remedy, the outer (which knows what was asked), and the
// report of a step prints that one alone.
func TestWithRemedyOverRemedy(t *testing.T) {
	node := WithRemedy(errors.New("device node /dev/nvidia0: no such file or directory"), "load the NVIDIA driver and create its nodes")
	err := WithRemedy(fmt.Errorf("the checkpoint ran with GPU node /dev/nvidia0: %w", node), "pass --gpus with GPUs of this host")
	want := "the checkpoint ran with GPU node /dev/nvidia0: device node /dev/nvidia0: no such file or directory; remedy: pass --gpus with GPUs of this host"
	if err.Error() != want {
		t.Fatalf("message %q, want %q", err.Error(), want)
	}
	se := &StepError{Op: "restore", ID: "c1", Err: fmt.Errorf("give it GPUs: %w", err)}
	if got := se.Error(); strings.Count(got, "remedy:") != 1 || !strings.HasSuffix(got, "remedy: pass --gpus with GPUs of this host") {
		t.Fatalf("step report %q", got)
	}
}
