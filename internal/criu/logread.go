package criu

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/cryo-gpu/cryo/internal/report"
)

// Reading CRIU's logs after a failure: the line that says why, the
// refusals a caller can lift by asking CRIU for an option, and a copy
// that outlives the directory the log was written in. What to tell the
// user, and which logs to keep, is the caller's to decide.

// ReadLog is CRIU's log at path (its first 16 MiB), or "".
func ReadLog(path string) string {
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 16<<20))
	return string(b)
}

// LogCause returns the first "Error" line of a CRIU log that says why: the
// lines after it are the unwinding, "… FAILED." is a summary, and CRIU
// always fails to raise RLIMIT_NOFILE where the hard limit is fixed. ""
// when there is no log or no such line.
func LogCause(path string) string {
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "Error (") || harmless(line) {
			continue
		}
		if i := strings.Index(line, "): "); i > 0 {
			line = line[i+3:] // drop the timestamp and source location
		}
		return strings.TrimSpace(line)
	}
	return ""
}

// harmlessErrors are CRIU "Error" lines that do not say why a run failed:
// CRIU cannot raise its own RLIMIT_NOFILE where the hard limit is fixed
// (it logs that on every run, as "Can't setup RLIMIT_NOFILE for self" or a
// prlimit failure), and "… FAILED." is the summary of what went before.
var harmlessErrors = []string{"RLIMIT_NOFILE", "rlimit", "prlimit"}

func harmless(line string) bool {
	if strings.HasSuffix(line, "FAILED.") {
		return true
	}
	for _, h := range harmlessErrors {
		if strings.Contains(line, h) {
			return true
		}
	}
	return false
}

// KnownCause explains a cause line (LogCause) that does not say what to
// do, as text to append to it: " (…)", or "".
func KnownCause(line string) string {
	// Linux 6.16 restricted SO_PASSCRED/SO_PASSSEC to unix and netlink
	// sockets; CRIU before 4.2 asks for them on every socket.
	if strings.Contains(line, "Can't get 1:16 opt") || strings.Contains(line, "Can't get 1:34 opt") {
		return " (CRIU older than 4.2 cannot checkpoint TCP or UDP sockets on Linux 6.16 and later: " +
			"use CRIU 4.2 or later, or let the application use unix sockets)"
	}
	return ""
}

// A refusal is a dump CRIU refused for something it handles only when
// asked to (or that the user can remove). It is its remedy's key: each
// front end words the fix its own way (report.Wording), so a new refusal
// is a line here and one in each front end's words, which their tests
// demand.
const (
	RefusedTerminal   report.Key = "terminal"        // the tree is attached to a terminal
	RefusedTCP        report.Key = "tcp-established" // an established TCP connection
	RefusedUnixSocket report.Key = "ext-unix-sk"     // a unix socket to a process outside the tree
	RefusedFileLock   report.Key = "file-locks"      // a held file lock
)

// Refusals are every refusal RefusalIn can report, in the order of the
// log lines that show them.
func Refusals() []report.Key {
	var out []report.Key
	for _, r := range refusals {
		if !slices.Contains(out, r.r) {
			out = append(out, r.r)
		}
	}
	return out
}

// refusals map a line of CRIU's log to the refusal it shows.
var refusals = []struct {
	line string
	r    report.Key
}{
	{"Task attached to shell terminal", RefusedTerminal},
	{"Found dangling tty", RefusedTerminal},
	{"is not a session leader", RefusedTerminal},
	{"Connected TCP socket", RefusedTCP},
	{"External socket is used", RefusedUnixSocket},
	{"Can't dump half of stream unix connection", RefusedUnixSocket},
	{"file locks are hold without", RefusedFileLock},
	{"Some file locks are hold", RefusedFileLock},
}

// RefusalIn reads CRIU's log at path for a refusal; "" if none.
func RefusalIn(path string) report.Key {
	log := ReadLog(path)
	for _, r := range refusals {
		if strings.Contains(log, r.line) {
			return r.r
		}
	}
	return ""
}

// CopyLog copies the log at from to to (owner-only), making to's
// directory: the evidence of a failure kept from a work directory about
// to be removed.
func CopyLog(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// badSize is CRIU's file validation on restore (files-reg.c,
// validate_file): a file the checkpoint had open is now of another size.
var badSize = regexp.MustCompile(`File (.+) has bad size (\d+) \(expect (\d+)\)`)

// KnownRemedy is the remedy of a cause line (LogCause) whose fix cryo
// knows, or "": the caller's generic "read the CRIU log" is the fallback.
func KnownRemedy(line string) string {
	if m := badSize.FindStringSubmatch(line); m != nil {
		return fmt.Sprintf("the file %s changed since the checkpoint (%s bytes now, %s then; CRIU reopens each file the processes had open and checks its size): put it back as it was (a log written to since: save a copy, then truncate -s %s %s), then retry", m[1], m[2], m[3], m[3], m[1])
	}
	return ""
}

// RemedyOf is KnownRemedy of err's message; "" for no error.
func RemedyOf(err error) string {
	if err == nil {
		return ""
	}
	return KnownRemedy(err.Error())
}
