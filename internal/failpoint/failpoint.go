// Package failpoint is the wait that test builds (-tags cryo_failpoints)
// hold a step with, so that a test can signal, kill or starve cryo at a
// chosen point instead of sampling delays. Only files behind that tag
// call it: the shipped binaries link none of it.
package failpoint

import (
	"errors"
	"io/fs"
	"os"
	"time"
)

// MaxWait bounds a hold: a test that forgot its file must not leave a
// sequence hanging for good.
const MaxWait = 2 * time.Minute

// Wait creates file, to tell the test that the step is reached, and
// returns once the test removed it, or after MaxWait.
func Wait(file string) {
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		return
	}
	for end := time.Now().Add(MaxWait); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			return
		}
	}
}
