package doctor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// identify tells whether the binary at path is this cryo: the same file
// (the usual install is a symlink to one multi-call binary), a byte-for-byte
// copy, or a binary whose versionArgs output names this version. It
// returns a phrase for the check's detail, and whether it matched.
func (e *env) identify(ctx context.Context, path string, versionArgs ...string) (string, bool) {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "unreadable: " + err.Error(), false
	}
	via := ""
	if resolved != path {
		via = " → " + resolved
	}
	switch {
	case sameFile(resolved, e.self):
		return path + via + ", this cryo (" + cryoVersion() + ")", true
	case sameContent(resolved, e.self):
		return path + via + ", a copy of this cryo (" + cryoVersion() + ")", true
	}
	if len(versionArgs) > 0 {
		out := runOutput(ctx, path, versionArgs...)
		if v := cryoVersion(); v != "dev" && containsWord(out, v) {
			return path + via + ", cryo " + v, true
		}
		if out = oneLine(out); out != "" {
			return path + via + ", another build (" + strings.Join(versionArgs, " ") + ": " + truncate(out, 100) + "), not this cryo " + cryoVersion(), false
		}
	}
	return path + via + ", another build than this cryo " + cryoVersion() + " (" + e.self + ")", false
}

// sameContent compares two files by size, then by SHA-256.
func sameContent(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	if err != nil || sa.Size() != sb.Size() {
		return false
	}
	ha, hb := fileHash(a), fileHash(b)
	return ha != nil && bytes.Equal(ha, hb)
}

func fileHash(p string) []byte {
	f, err := os.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil
	}
	return h.Sum(nil)
}

// runOutput runs a short command and returns its output, whatever its
// exit status.
func runOutput(ctx context.Context, name string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = time.Second
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// containsWord reports whether w occurs in s between non-word characters.
func containsWord(s, w string) bool {
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\n' || r == '\t' || r == ',' || r == '(' || r == ')' }) {
		if f == w || strings.TrimPrefix(f, "v") == strings.TrimPrefix(w, "v") {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
