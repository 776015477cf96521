package bundle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func bundleWith(t *testing.T, spec string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(Path(dir), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The typed spec, and the parts a caller reads where the whole spec would
// not parse (a number too large for its field).
func TestRead(t *testing.T) {
	dir := bundleWith(t, `{"ociVersion":"1.0.2","annotations":{"a":"b"},"linux":{"cgroupsPath":"s:p:n"}}`)
	s, err := Read(dir)
	if err != nil || s.Annotations["a"] != "b" || s.Linux.CgroupsPath != "s:p:n" {
		t.Fatalf("Read: %+v, %v", s, err)
	}
	odd := bundleWith(t, `{"process":{"oomScoreAdj":12345678901234567890},"annotations":{"a":"b"},"linux":{"cgroupsPath":"/x"}}`)
	if _, err := Read(odd); !IsParse(err) {
		t.Fatalf("an unparsable spec: %v", err)
	}
	if a := Annotations(odd); a["a"] != "b" {
		t.Errorf("Annotations of a spec with an odd field: %v", a)
	}
	if p, ok := CgroupsPath(odd); p != "/x" || !ok {
		t.Errorf("CgroupsPath: %q %v", p, ok)
	}
	missing := filepath.Join(t.TempDir(), "none")
	if _, err := Read(missing); err == nil || IsParse(err) || Annotations(missing) != nil {
		t.Fatalf("a missing spec: %v", err)
	}
	if _, ok := CgroupsPath(bundleWith(t, `{}`)); ok {
		t.Error("a spec without linux has a cgroupsPath")
	}
}

// A rewrite keeps what cryo does not know, numbers verbatim.
func TestRawRewrite(t *testing.T) {
	dir := bundleWith(t, `{"process":{"oomScoreAdj":12345678901234567890},"x-runtime":{"k":1}}`)
	r, err := ReadRaw(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Annotation("k"); ok {
		t.Fatal("an annotation of a spec without annotations")
	}
	r.SetAnnotation("k", "")
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(Path(dir))
	for _, want := range []string{`12345678901234567890`, `"x-runtime":{"k":1}`, `"annotations":{"k":""}`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("%s lacks %s", data, want)
		}
	}
	r, _ = ReadRaw(dir)
	if v, ok := r.Annotation("k"); !ok || v != "" {
		t.Errorf("an empty annotation read back as %q %v", v, ok)
	}
}
