package doctor

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Status is a check's verdict; see the package comment for the rule.
type Status string

const (
	OK   Status = "ok"
	Skip Status = "skip"
	Warn Status = "warn"
	Fail Status = "fail"
)

// Check is one line of the report. Fix is the one remedy, for warn and
// fail.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Report is the doctor's result; it serialises as JSON with these names.
type Report struct {
	// Version is the version of the cryo that checked.
	Version string  `json:"version"`
	Checks  []Check `json:"checks"`
	// Summary counts the statuses, as numbers so that scripts need not
	// parse words; its String is the text line ("12 ok, 2 skipped, …").
	Summary Summary `json:"summary"`
}

// Summary is the number of checks of each status.
type Summary struct {
	OK       int `json:"ok"`
	Skipped  int `json:"skipped"`
	Warnings int `json:"warnings"`
	Failed   int `json:"failed"`
}

// String is the summary as the text report prints it:
// "12 ok, 2 skipped, 1 warning, 0 failed".
func (s Summary) String() string {
	return fmt.Sprintf("%d ok, %d skipped, %s, %d failed", s.OK, s.Skipped, plural(s.Warnings, "warning"), s.Failed)
}

func newReport(checks []Check) Report {
	return Report{Version: cryoVersion(), Checks: checks, Summary: summary(checks)}
}

// Failed reports whether a check failed: `cryo doctor` exits 1 then.
func (r Report) Failed() bool {
	for _, c := range r.Checks {
		if c.Status == Fail {
			return true
		}
	}
	return false
}

// Count is the number of checks with status s.
func (r Report) Count(s Status) int {
	n := 0
	for _, c := range r.Checks {
		if c.Status == s {
			n++
		}
	}
	return n
}

func summary(checks []Check) Summary {
	r := Report{Checks: checks}
	return Summary{OK: r.Count(OK), Skipped: r.Count(Skip), Warnings: r.Count(Warn), Failed: r.Count(Fail)}
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// WriteText writes the report as aligned columns (status, name, detail),
// each fix on its own line under its check, and the summary last.
func (r Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Status, c.Name, oneLine(c.Detail))
		if c.Fix != "" && (c.Status == Warn || c.Status == Fail) {
			fmt.Fprintf(tw, "\t\tfix: %s\n", oneLine(c.Fix))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%s (cryo %s)\n", r.Summary.String(), r.Version)
	return err
}

// oneLine keeps a multi-line detail (a command's output) on its row.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
