package digest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A vouched file is not hashed, but it must still be there with the
// recorded size; every other file is hashed as before; and full
// verification (CRYO_VERIFY=full) hashes the vouched ones too.
func TestVerifyVouched(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("pages-1.img", "pages")
	write("core-1.img", "core")
	digests, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	vouched := map[string]bool{"pages-1.img": true}
	write("pages-1.img", "PAGES") // same size, other bytes
	r := Records{Dir: t.TempDir()}
	if _, err := r.VerifyStampedVouched(dir, digests, nil, vouched); err != nil {
		t.Fatalf("vouched file of the recorded size: %v, want it taken unread", err)
	}
	var ce *CorruptFileError
	full := Records{Dir: t.TempDir(), Full: true}
	if _, err := full.VerifyStampedVouched(dir, digests, nil, vouched); !errors.As(err, &ce) || ce.File != "pages-1.img" {
		t.Fatalf("full verification: %v, want pages-1.img refused", err)
	}
	write("pages-1.img", "pages, longer")
	if _, err := r.VerifyStampedVouched(dir, digests, nil, vouched); !errors.As(err, &ce) || ce.File != "pages-1.img" {
		t.Fatalf("vouched file of another size: %v, want it refused", err)
	}
	write("pages-1.img", "PAGES")
	write("core-1.img", "CORE")
	if _, err := r.VerifyStampedVouched(dir, digests, nil, vouched); !errors.As(err, &ce) || ce.File != "core-1.img" {
		t.Fatalf("changed file not vouched for: %v, want core-1.img refused", err)
	}
}
