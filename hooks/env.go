package hooks

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
)

// DefaultEnvFile is read when neither --cryo-env nor $CRYO_RUNC_ENV names
// one. Podman and conmon start the runtime with an almost empty environment,
// so settings such as CRYO_RUNC or CRYO_LIBCUDA must come from a file.
const DefaultEnvFile = "/etc/cryo/cryo-runc.env"

// LoadEnvFile applies KEY=VALUE lines (blank lines and # comments ignored)
// to the process environment. A variable already set wins, so that a caller
// can override the file. The environment reaches the real runc, CRIU and the
// CRIU action script, which is how they all see one configuration.
func LoadEnvFile(path string) error {
	explicit := path != ""
	if !explicit {
		path = os.Getenv(EnvFileEnv)
		explicit = path != ""
	}
	if !explicit {
		path = DefaultEnvFile
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && !explicit {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cryo: read environment file: %w (fix it, or the --cryo-env flag / $CRYO_RUNC_ENV naming it)", err)
	}
	defer f.Close()
	return applyEnv(f.Name(), bufio.NewScanner(f))
}

func applyEnv(name string, sc *bufio.Scanner) error {
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(strings.TrimPrefix(k, "export "))
		if !ok || k == "" {
			return fmt.Errorf("cryo: %s:%d: want KEY=VALUE, got %q", name, n, line)
		}
		if _, set := os.LookupEnv(k); !set {
			os.Setenv(k, strings.Trim(strings.TrimSpace(v), `"'`))
		}
	}
	return sc.Err()
}
