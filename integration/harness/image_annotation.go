package harness

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func ReadJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, v)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// PrivatePassword is the test user's password; privateHash is its bcrypt
// hash, as docker-registry's htpasswd file wants it.
const (
	PrivateUser     = "cryo"
	PrivatePassword = "cryo-secret"
	privateHash     = "$2a$04$PtSLPXjuQ2UDixFU2wTytuLk3ZPLw7waAcUCA2yEObPRi9MTQ/3QO"
)

// PrivateRegistry is a docker-registry on loopback that wants a user and
// password (htpasswd) for every request.
type PrivateRegistry struct{ *ImgRegistry }

func StartPrivateRegistry(t *testing.T) *PrivateRegistry {
	t.Helper()
	dir := t.TempDir()
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(PrivateUser+":"+privateHash+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &PrivateRegistry{startRegistryWith(t, "auth:\n  htpasswd:\n    realm: cryo-test\n    path: "+htpasswd+"\n")}
}

// authFile writes dir/auth.json with the test user and password for this
// registry, as `docker login` would, and returns its path.
func (r *PrivateRegistry) AuthFile(t *testing.T, dir, password string) string {
	t.Helper()
	token := base64.StdEncoding.EncodeToString([]byte(PrivateUser + ":" + password))
	path := filepath.Join(dir, "auth.json")
	data := fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, r.Addr, token)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
