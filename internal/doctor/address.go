package doctor

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// defaultAddress is containerd's socket when neither its --address nor
// its configuration's [grpc] address names another.
const defaultAddress = "/run/containerd/containerd.sock"

// daemonAddress is the socket a running containerd listens on: its
// --address/-a, else its configuration file's [grpc] address, else the
// default.
func daemonAddress(args []string, configFile string) string {
	if a := flagValue(args, "address", "a"); a != "" {
		return a
	}
	if data, err := os.ReadFile(configFile); err == nil {
		var c struct {
			GRPC struct {
				Address string `toml:"address"`
			} `toml:"grpc"`
		}
		if toml.Unmarshal(data, &c) == nil && c.GRPC.Address != "" {
			return c.GRPC.Address
		}
	}
	return defaultAddress
}

// flagValue is the value of the flag --long/-short in args ("--long=V",
// "--long V", "-short V", "-short=V").
func flagValue(args []string, long, short string) string {
	for i, a := range args {
		a = "-" + strings.TrimLeft(a, "-")
		for _, n := range []string{long, short} {
			if v, ok := strings.CutPrefix(a, "-"+n+"="); ok {
				return v
			}
			if a == "-"+n && i+1 < len(args) {
				return args[i+1]
			}
		}
	}
	return ""
}

// atAddress keeps the daemons that listen on address; all of them when
// address is "" (no --address, no $CONTAINERD_ADDRESS).
func atAddress(ds []daemon, address string) []daemon {
	if address == "" {
		return ds
	}
	var out []daemon
	for _, d := range ds {
		if filepath.Clean(d.address) == filepath.Clean(strings.TrimPrefix(address, "unix://")) {
			out = append(out, d)
		}
	}
	return out
}
