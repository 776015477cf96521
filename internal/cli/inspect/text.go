package inspect

import (
	"fmt"

	"github.com/cryo-gpu/cryo/internal/progress"
)

// human writes a byte count in binary units ("20.0 KiB"), as every cryo
// line does.
func human(n int64) string { return progress.Human(n) }

// micros writes CRIU's microsecond times as a duration: "1.234 ms".
func micros(us uint32) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%d µs", us)
	case us < 1000000:
		return fmt.Sprintf("%.3f ms", float64(us)/1e3)
	}
	return fmt.Sprintf("%.3f s", float64(us)/1e6)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
