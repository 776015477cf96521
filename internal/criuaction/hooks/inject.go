package hooks

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/criu"
)

// ErrForeignCRIUConfig: the container already names a CRIU configuration of
// its own, which cryo leaves alone.
var ErrForeignCRIUConfig = criu.ErrForeignConfig

// Prepare writes the action script into bundle and adds it to the bundle's
// CRIU configuration (see criu.AddConfig). action is the absolute
// path of cryo-criu-action; envFile (may be empty) is cryo-runc's
// environment file. A config.json that already names a CRIU configuration
// other than cryo's is left as it is (ErrForeignCRIUConfig).
func Prepare(bundle, id, action, envFile string) error {
	bundle, err := filepath.Abs(bundle)
	if err != nil {
		return err
	}
	if err := writeScript(bundle, id, action, envFile); err != nil {
		return err
	}
	if _, err := criu.AddConfig(bundle, "action-script "+filepath.Join(bundle, scriptName)); err != nil {
		return fmt.Errorf("%w, to make direct runc checkpoints CUDA-safe", err)
	}
	return nil
}

// writeScript writes the action script CRIU runs: it carries the container
// id and the environment file, which CRIU has no way to pass.
func writeScript(bundle, id, action, envFile string) error {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	fmt.Fprintf(&b, "%s=%s %s=%s %s=%s exec %s\n", config.EnvContainerID, shellQuote(id), config.EnvBundle, shellQuote(bundle),
		config.EnvEnvFile, shellQuote(envFile), shellQuote(action))
	p := filepath.Join(bundle, scriptName)
	if err := os.WriteFile(p, []byte(b.String()), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
