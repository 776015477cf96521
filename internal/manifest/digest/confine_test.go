package digest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Digest names come from an untrusted manifest: none may lead outside the
// image directory, even to a file whose digest the attacker knows.
func TestVerifyConfined(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "img")
	os.Mkdir(dir, 0o700)
	secret := filepath.Join(root, "secret")
	os.WriteFile(secret, []byte("secret"), 0o600)
	os.WriteFile(filepath.Join(dir, "core-1.img"), []byte("core"), 0o600)
	os.Symlink(secret, filepath.Join(dir, "leak.img"))
	os.Symlink(root, filepath.Join(dir, "up"))
	sum, err := Files(root) // digests of the secret as seen from root
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../secret", secret, "leak.img", "up/secret", "./core-1.img", "x/../../secret"} {
		d, _ := Files(dir)
		d[name] = sum["secret"]
		for what, err := range map[string]error{"Verify": Verify(dir, d), "VerifyStampedWith": second(Records{Dir: t.TempDir()}.VerifyStampedWith(dir, d, nil))} {
			var ce *CorruptFileError
			if !errors.As(err, &ce) || ce.File != name || !strings.Contains(err.Error(), "outside the image directory") {
				t.Errorf("%s with digest name %q: %v, want a refusal naming it", what, name, err)
			}
		}
	}
}

func second[T any](_ T, err error) error { return err }
