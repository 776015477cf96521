package cli

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

// The flag getters ignore the lookup error: it only happens for a flag the
// command does not define, which the CLI tests catch.
func fString(cmd *cobra.Command, name string) string {
	v, _ := cmd.Flags().GetString(name)
	return v
}

func fBool(cmd *cobra.Command, name string) bool {
	v, _ := cmd.Flags().GetBool(name)
	return v
}

func fInt(cmd *cobra.Command, name string) int {
	v, _ := cmd.Flags().GetInt(name)
	return v
}

func fInt64(cmd *cobra.Command, name string) int64 {
	v, _ := cmd.Flags().GetInt64(name)
	return v
}

func fDuration(cmd *cobra.Command, name string) time.Duration {
	v, _ := cmd.Flags().GetDuration(name)
	return v
}

func fStrings(cmd *cobra.Command, name string) []string {
	v, _ := cmd.Flags().GetStringSlice(name)
	return v
}

// alias adds old as a hidden, deprecated name of the flag new: scripts
// written for earlier releases keep working and are told the new name.
func alias(fs *pflag.FlagSet, old, new string) {
	f := fs.Lookup(new)
	a := *f
	a.Name, a.Shorthand = old, ""
	fs.AddFlag(&a)
	_ = fs.MarkDeprecated(old, "use --"+new)
}

func addStoreFlag(fs *pflag.FlagSet) {
	fs.String("store", "", "local image store `DIR`, an OCI image layout (default $"+config.EnvImageStore+", else "+config.DefaultImageStore+" for root, ~/.local/share/cryo/images otherwise)")
}

// addRemoteFlags are the registry options, with Podman's names.
func addRemoteFlags(fs *pflag.FlagSet) {
	fs.Bool("tls-verify", true, "require HTTPS with a verified certificate (false: accept any certificate)")
	fs.Bool("plain-http", false, "talk plain HTTP to the registry (automatic for loopback addresses)")
	fs.String("authfile", "", "auth `FILE` to try first (Podman's auth.json or Docker's config.json format); then $REGISTRY_AUTH_FILE, Podman's and Docker's usual files")
	fs.Int("retries", 3, "`N` attempts of a whole transfer; blobs already moved are kept")
	fs.BoolP("quiet", "q", false, "no progress on stderr")
	// --insecure was cryo's name before --tls-verify.
	fs.Bool("insecure", false, "HTTPS without certificate verification")
	_ = fs.MarkDeprecated("insecure", "use --tls-verify=false")
}

// addContainerdFlags are ctr's names and environment variables.
func (ap *app) addContainerdFlags(fs *pflag.FlagSet) {
	fs.String("address", cmp.Or(ap.cfg.ContainerdAddress, "/run/containerd/containerd.sock"), "containerd's socket `PATH` ($CONTAINERD_ADDRESS)")
	fs.StringP("namespace", "n", cmp.Or(ap.cfg.ContainerdNamespace, "default"), "containerd `NAMESPACE` ($CONTAINERD_NAMESPACE)")
}

// addDecryptFlags: Podman's --decryption-key; --key was cryo's earlier name.
func addDecryptFlags(fs *pflag.FlagSet) {
	fs.StringSlice("decryption-key", nil, "private key `FILE` (PEM) that decrypts an encrypted image; repeatable")
	alias(fs, "key", "decryption-key")
}

// addCopyTimeout bounds the driver's GPU memory copies: a hung driver holds
// the workload frozen until then, and the default suits tens of GiB.
func (ap *app) addCopyTimeout(fs *pflag.FlagSet) {
	d := config.DefaultCopyTime
	if ap.cfg.CopyTimeout > 0 {
		d = ap.cfg.CopyTimeout
	}
	fs.Duration("copy-timeout", d, "deadline of a driver call that copies GPU memory (suspend, restore); a hung driver is cut off then and the processes rolled back ($"+config.EnvCopyTimeout+")")
}

// addDriverFlags are the options of the commands that call the driver
// directly.
func (ap *app) addDriverFlags(fs *pflag.FlagSet) {
	fs.String("libcuda", ap.cfg.LibCUDA, "`PATH` of the CUDA driver library (default libcuda.so.1; $"+config.EnvLibCUDA+")")
	fs.Duration("call-timeout", 30*time.Second, "deadline of a driver call that copies no memory")
	ap.addCopyTimeout(fs)
}

func (ap *app) addGPUMapFlag(fs *pflag.FlagSet) {
	var def []string
	if ap.cfg.GPUMap != "" {
		def = strings.Split(ap.cfg.GPUMap, ",")
	}
	fs.StringSlice("gpu-map", def, "restore the GPU OLD-UUID onto NEW-UUID of this host (`OLD=NEW`, repeatable; $"+config.EnvGPUMap+"); default: the same UUID if present, else a free GPU of the same model")
}

// addAllowIPC lets a checkpoint or suspend go ahead for processes whose GPU
// memory cryo judges the driver cannot restore (see
// orchestrate.Orchestrator.AllowCUDAIPC).
func (ap *app) addAllowIPC(fs *pflag.FlagSet) {
	fs.Bool("allow-cuda-ipc", ap.cfg.AllowCUDAIPC, "suspend processes cryo refuses because driver 580 could not restore them: NCCL ranks without NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_CUMEM_ENABLE=0 in their environment, and JAX processes on several GPUs (for jobs that set these from inside, or a driver that restores them; driver 580 loses the others) ($"+config.EnvAllowCUDAIPC+")")
}

func addLockTimeout(fs *pflag.FlagSet) {
	fs.Duration("lock-timeout", 10*time.Second, "how long the driver may wait for in-flight GPU work before locking")
}

// positive refuses a duration flag that is not positive: the driver reads
// zero or less as "its default", which would silently replace what the user
// typed.
func positive(cmd *cobra.Command, name, example string) (time.Duration, error) {
	d := fDuration(cmd, name)
	if d <= 0 {
		return 0, usageRemedy(cmd, fmt.Errorf("--%s must be positive (got %s)", name, d), "give a duration such as "+example)
	}
	return d, nil
}

// driverOption is the driver of a command with --copy-timeout.
func (ap *app) driverOption(cmd *cobra.Command) (orchestrate.Option, error) {
	d, err := ap.copyTimeout(cmd)
	if err != nil {
		return nil, err
	}
	opts := orchestrate.DriverOptions(ap.cfg)
	opts.CopyTimeout = d
	return orchestrate.WithDriverOptions(opts), nil
}

// copyTimeout is --copy-timeout. Its default comes from
// $CRYO_COPY_TIMEOUT: a bad value there is refused rather than replaced by
// the built-in default, which the user did not choose.
func (ap *app) copyTimeout(cmd *cobra.Command) (time.Duration, error) {
	if err := ap.cfg.CopyTimeoutErr; err != nil && !cmd.Flags().Changed("copy-timeout") {
		return 0, usageRemedy(cmd, errors.New(err.Error()), "unset "+config.EnvCopyTimeout+", fix it, or give --copy-timeout")
	}
	return positive(cmd, "copy-timeout", "90s or 5m")
}

func gpuMap(cmd *cobra.Command) ([]cuda.GPUPair, error) {
	pairs, err := orchestrate.ParseGPUMap(strings.Join(fStrings(cmd, "gpu-map"), ","))
	if err != nil {
		return nil, usageErrorf(cmd, "--gpu-map: %v", err)
	}
	return pairs, nil
}
