package orchestrate

import (
	"errors"
	"strings"
	"testing"
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
