package config

import (
	"errors"
	"fmt"
	"time"
)

// DefaultRestoreTime bounds a restore when CRYO_RESTORE_TIMEOUT is unset
// (a pod's container has DefaultKubernetesRestoreTime). CRIU reads the processes' memory back at
// disk speed: a 16 GiB restore takes 4 to 12 s on the GPU hosts, so an
// 80 GiB image (the largest GPUs' memory, plus host memory) needs about a
// minute on a fast disk and several on a slow or network one. Ten minutes
// leaves the largest images room on slow storage, while a CRIU that hangs
// on a crafted image holds its container for minutes rather than for good;
// a site with bigger images or slower storage raises it.
const DefaultRestoreTime = 10 * time.Minute

// ErrBadRestoreTimeout is a CRYO_RESTORE_TIMEOUT that is not a positive
// duration.
var ErrBadRestoreTimeout = ErrBadDuration

// ErrBadDuration is a duration variable set to anything but a positive
// duration.
var ErrBadDuration = errors.New("not a positive duration")

// restoreTimeout parses $CRYO_RESTORE_TIMEOUT: the default when unset, an
// error when set to anything but a positive duration. Unlike a bad copy
// timeout, a bad restore timeout is not replaced by the default: a user who
// set "5" meaning minutes, or "-1" meaning none, would get a bound they did
// not choose, so every restore is refused until it is fixed.
func restoreTimeout(v string) (time.Duration, error) {
	if v == "" {
		return DefaultRestoreTime, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: %w (a Go duration such as 15m or 1h30m)", EnvRestoreTimeout, v, ErrBadRestoreTimeout)
	}
	return d, nil
}
