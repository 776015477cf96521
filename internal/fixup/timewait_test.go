package fixup

import (
	"testing"
	"time"
)

func TestTimeWaitLine(t *testing.T) {
	cases := []struct {
		line string
		port uint32
		left time.Duration
		ok   bool
	}{
		// TIME_WAIT on 39778, 59.98 s left.
		{"   3: 0100007F:9B62 0100007F:C1D0 06 00000000:00000000 03:0000176E 00000000     0        0 0 3 000000001b32473e", 39778, 59980 * time.Millisecond, true},
		// FIN_WAIT2 orphan.
		{"   4: 020200C0:E971 020200C0:BFE2 05 00000000:00000000 03:00000F10 00000000     0        0 0 3 00000000af8c91fe", 59761, 38560 * time.Millisecond, true},
		// A listener, and an established socket a process holds: not waited for.
		{"   1: 00000000:9B62 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 975978 1 00000000eeeb917b 100 0 0 10 0", 0, 0, false},
		{"   2: 0100007F:9B62 0100007F:C1D0 01 00000000:00000000 00:00000000 00000000     0        0 975979 1 00000000eeeb917b 20 4 30 10 -1", 0, 0, false},
		{"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode", 0, 0, false},
	}
	for _, c := range cases {
		port, left, ok := timeWaitLine(c.line)
		if port != c.port || left != c.left || ok != c.ok {
			t.Errorf("%q: got %d %s %v, want %d %s %v", c.line, port, left, ok, c.port, c.left, c.ok)
		}
	}
}
