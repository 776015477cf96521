package harness

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// The helpers every test of fakecuda-app shares: its tick lines, and the
// byte flip that stands for a corrupted image file.

// FakeTickRE is one tick line of fakecuda-app: its number, the CUDA state
// the app sees, and the check of its device memory.
var FakeTickRE = regexp.MustCompile(`tick (\d+) state=(\w+) sum=(\w+)`)

// FakeTicks lists the tick numbers in out, in order, failing the test on a
// tick whose device memory is broken (sum=BAD) or that ran with CUDA not
// running. what names the output in the failure.
func FakeTicks(t testing.TB, what, out string) []int {
	t.Helper()
	var ticks []int
	for _, m := range FakeTickRE.FindAllStringSubmatch(out, -1) {
		if m[2] != "running" || m[3] != "OK" {
			t.Fatalf("%s: bad tick %q (the app's device memory or CUDA state was lost)\n%s", what, m[0], Tail(out, 20))
		}
		n, _ := strconv.Atoi(m[1])
		ticks = append(ticks, n)
	}
	return ticks
}

// LastOf is the last of ticks, or -1 when there is none.
func LastOf(ticks []int) int {
	if len(ticks) == 0 {
		return -1
	}
	return ticks[len(ticks)-1]
}

// FlipByte inverts the middle byte of a file: a corrupted image file.
func FlipByte(t testing.TB, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		t.Fatalf("read %s: %v", path, err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
