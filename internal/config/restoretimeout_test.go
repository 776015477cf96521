package config

import (
	"errors"
	"testing"
	"time"
)

func TestRestoreTimeout(t *testing.T) {
	if c := parse(nil); c.RestoreTimeout != DefaultRestoreTime || c.RestoreTimeoutErr != nil {
		t.Errorf("unset: %s %v, want the default %s", c.RestoreTimeout, c.RestoreTimeoutErr, DefaultRestoreTime)
	}
	if c := parse([]string{EnvRestoreTimeout + "=90s"}); c.RestoreTimeout != 90*time.Second || c.RestoreTimeoutErr != nil {
		t.Errorf("90s: %s %v", c.RestoreTimeout, c.RestoreTimeoutErr)
	}
	for _, v := range []string{"-1m", "0", "0s", "5", "ten minutes"} {
		c := parse([]string{EnvRestoreTimeout + "=" + v})
		if !errors.Is(c.RestoreTimeoutErr, ErrBadRestoreTimeout) || c.RestoreTimeout != 0 {
			t.Errorf("%s=%q: %s %v, want ErrBadRestoreTimeout and no bound", EnvRestoreTimeout, v, c.RestoreTimeout, c.RestoreTimeoutErr)
		}
	}
}
