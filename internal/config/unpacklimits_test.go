package config

import (
	"strings"
	"testing"
	"time"
)

func TestUnpackLimits(t *testing.T) {
	c := parse([]string{EnvUnpackMaxEntries + "=500", EnvUnpackMaxDepth + "=8", EnvUnpackMaxName + "=-1", EnvUnpackMaxPath + "=lots"})
	if c.Unpack.MaxEntries != 500 || c.Unpack.MaxDepth != 8 || c.Unpack.MaxNameBytes != 0 || c.Unpack.MaxPathBytes != 0 {
		t.Fatalf("limits %+v, want 500, 8 and the defaults for the bad ones", c.Unpack)
	}
	if len(c.Problems) != 2 || !strings.Contains(c.Problems[0].Error(), EnvUnpackMaxName) || !strings.Contains(c.Problems[1].Error(), EnvUnpackMaxPath) {
		t.Fatalf("problems %v, want the two bad values named", c.Problems)
	}
}

// A pod's container gets a deadline under the kubelet's 2 minutes unless
// the node sets one; anything else keeps the long default.
func TestRestoreLimit(t *testing.T) {
	unset := parse(nil)
	if unset.RestoreLimit(true) != DefaultKubernetesRestoreTime || DefaultKubernetesRestoreTime >= 2*time.Minute || unset.RestoreLimit(false) != DefaultRestoreTime {
		t.Fatalf("unset: %s for a pod, %s otherwise", unset.RestoreLimit(true), unset.RestoreLimit(false))
	}
	set := parse([]string{EnvRestoreTimeout + "=30m"})
	if set.RestoreLimit(true) != 30*time.Minute || set.RestoreLimit(false) != 30*time.Minute {
		t.Fatalf("set: %s for a pod, %s otherwise", set.RestoreLimit(true), set.RestoreLimit(false))
	}
}
