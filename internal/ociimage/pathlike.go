package ociimage

import (
	"io/fs"
	"os"
	"strings"
)

// LooksLikePath says whether a target of "a directory, a tar or an image
// reference" is meant as a path: one that starts with / . or ~ (a
// reference never does), one that exists, or one that ends like an export
// tar and has no tag or digest. Such a target is never sent to a registry.
func LooksLikePath(target string) bool {
	if strings.HasPrefix(target, "/") || strings.HasPrefix(target, ".") || strings.HasPrefix(target, "~") {
		return true
	}
	if _, err := os.Lstat(target); err == nil {
		return true
	}
	base := target[strings.LastIndex(target, "/")+1:]
	if strings.Contains(base, ":") || strings.Contains(target, "@") {
		return false // a tag or a digest: a reference
	}
	for _, ext := range []string{".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.zstd"} {
		if strings.HasSuffix(base, ext) {
			return true
		}
	}
	return false
}

// MissingPathError is a path target that names nothing.
type MissingPathError struct{ Path string }

func (e *MissingPathError) Error() string { return "no such file or directory: " + e.Path }

func (e *MissingPathError) Unwrap() error { return fs.ErrNotExist }
