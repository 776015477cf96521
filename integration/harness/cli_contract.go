package harness

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

// CryoSplit runs cryo and returns stdout and stderr apart: a script reads
// the result (a pid, a digest, JSON) from stdout alone.
func CryoSplit(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), BareTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, CryoBin(t, "cryo"), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil
	}
	return out.String(), errOut.String(), ExitCode(err)
}
