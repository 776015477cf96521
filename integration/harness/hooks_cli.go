package harness

import (
	"regexp"
	"strconv"
	"testing"
)

var afterTick = regexp.MustCompile(`^(sleep|wake)_after-tick_(\d+)$`)

// EventTick is the tick an event was recorded after, failing on an event
// recorded while the app did not tick.
func EventTick(t *testing.T, event, kind string) int {
	t.Helper()
	m := afterTick.FindStringSubmatch(event)
	if m == nil || m[1] != kind {
		t.Fatalf("event %q, want %s after a tick of the running app", event, kind)
	}
	n, _ := strconv.Atoi(m[2])
	return n
}
