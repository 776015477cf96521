package podman

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestNameInFree(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("no podman")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := NameIn(ctx, nil, fmt.Sprintf("cryo-precheck-none-%d", os.Getpid())); err != nil {
		t.Errorf("unused name refused: %v", err)
	}
}
