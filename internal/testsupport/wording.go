package testsupport

import (
	"testing"

	"github.com/cryo-gpu/cryo/internal/report"
)

// CheckWording checks one front end's words for the keyed remedies: every
// key of keys (orchestrate.RemedyKeys, which the caller passes so that
// this package imports no orchestration) has words in got, and they are
// want's. A key the front end leaves unworded fails here.
func CheckWording(t testing.TB, keys []report.Key, got report.Wording, want map[report.Key]string) {
	t.Helper()
	for _, k := range keys {
		if got[k] == "" || got[k] != want[k] {
			t.Errorf("%s:\n got: %s\nwant: %s", k, got[k], want[k])
		}
	}
}
